//! The store's unit tests.

use super::*;
use budget_protocol::tree::{AccountPatch, NewAccount};
use budget_protocol::{JobRun, JobSync, SyncOutcome};

/// A store on a fresh database in a temp dir (kept alive by the `TempDir`).
pub(crate) fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Store::open(&dir.path().join("t.db"), &PolicyPatch::default()).expect("open");
    (dir, s)
}

fn job_run(job_id: u32, submit: i64, account: &str, state: RunState, start: Option<i64>) -> JobRun {
    JobRun {
        submit: Some(submit),
        start,
        ..JobRun::new(job_id, 0, account, format!("{account}-user"), 2, state)
    }
}

fn sync_one(s: &mut Store, r: JobRun, now: i64) -> SyncOutcome {
    s.sync(
        &JobSync {
            collected_at: now,
            runs: vec![r],
            live: None,
            queue: None,
        },
        now,
    )
    .expect("sync")
}

/// A job id Slurm reuses (a cold-started controller, or
/// MaxJobId wrapping) is a new run, never merged into the old job's; a
/// database from before the submit key migrates, its rows adopting the
/// submit time the upgraded plugin sends, without duplicates.
#[test]
fn reused_job_ids_are_new_runs_and_old_databases_migrate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old.db");
    {
        // A database of schema 3 (before the submit key) with one running run.
        let conn = Connection::open(&path).expect("open");
        for (i, sql) in crate::db::MIGRATIONS[..3].iter().enumerate() {
            conn.execute_batch(sql).expect("migrate");
            conn.pragma_update(None, "user_version", (i + 1) as i64)
                .expect("version");
        }
        conn.execute(
            "INSERT INTO runs(job_id, run, account, user, gpus, start, free_tier, min_runtime, \
             state, first_seen, source) VALUES (1, 0, 'bio', 'bio-user', 2, 1000, 0, 0, \
             'running', 1000, 'sync')",
            [],
        )
        .expect("old row");
    }
    let mut s = Store::open(&path, &PolicyPatch::default()).expect("open and migrate");
    assert_eq!(s.count_runs_in_db().expect("count"), 1);
    // The upgraded plugin sends the same run with its submit time: adopted.
    let out = sync_one(
        &mut s,
        job_run(1, 900, "bio", RunState::Running, Some(1000)),
        1100,
    );
    assert_eq!((out.inserted, out.updated), (0, 1));
    assert_eq!(s.count_runs_in_db().expect("count"), 1);
    assert_eq!(s.ledger().get(1, 0).map(|r| r.submit), Some(900));
    // A cold-started controller hands out id 1 again: a new job, new row.
    let out = sync_one(
        &mut s,
        job_run(1, 5000, "filler", RunState::Pending, None),
        5001,
    );
    assert_eq!((out.inserted, out.updated, out.unchanged), (1, 0, 0));
    let out = sync_one(
        &mut s,
        job_run(1, 5000, "filler", RunState::Running, Some(5010)),
        5020,
    );
    assert_eq!(out.updated, 1);
    let new = s.ledger().get(1, 0).expect("new job");
    assert_eq!((new.account.as_str(), new.start), ("filler", Some(5010)));
    let old = s.ledger().find(1, 0, 900).expect("old job kept");
    assert_eq!((old.account.as_str(), old.start), ("bio", Some(1000)));
    // Usage: the new job charges filler from its own start, not from bio's.
    let u = s.ledger().usage(5110, 10_000);
    let of = |a: &str| {
        u.charged
            .iter()
            .filter(|r| r.0 == a)
            .map(|r| r.3)
            .sum::<i128>()
    };
    assert_eq!(of("filler"), 2 * 100);
    assert_eq!(of("bio"), 2 * (5110 - 1000));
    // Both survive a restart.
    drop(s);
    let s = Store::open(&path, &PolicyPatch::default()).expect("reopen");
    assert_eq!(s.ledger().len(), 2);
    assert_eq!(
        s.ledger().get(1, 0).map(|r| r.account),
        Some("filler".into())
    );
}

/// Sends Slurm's complete live set `jobs` collected at `at`; the runs closed.
fn live(s: &mut Store, at: i64, jobs: &[(u32, i64)]) -> u64 {
    s.sync(
        &JobSync {
            collected_at: at,
            runs: vec![],
            live: Some(jobs.to_vec()),
            queue: None,
        },
        at,
    )
    .expect("sync")
    .closed
}

/// With the complete live set, the runs Slurm forgot are
/// closed at the previous complete set's time; live ones stay open; a
/// pending run never charged; a stale submission of a reused id closed.
#[test]
fn a_complete_live_set_closes_what_slurm_forgot() {
    let (_d, mut s) = store();
    sync_one(
        &mut s,
        job_run(1, 90, "a", RunState::Running, Some(100)),
        110,
    );
    sync_one(
        &mut s,
        job_run(2, 95, "b", RunState::Running, Some(105)),
        110,
    );
    sync_one(&mut s, job_run(3, 99, "c", RunState::Pending, None), 110);
    // Everything live at 200.
    assert_eq!(live(&mut s, 200, &[(1, 90), (2, 95), (3, 99)]), 0);
    // At 500 Slurm has only job 1; job 2 vanished (e.g. a start lost in a
    // controller crash), job 3 was cancelled while pending.
    assert_eq!(live(&mut s, 500, &[(1, 90)]), 2);
    let two = s.ledger().get(2, 0).expect("run");
    assert_eq!((two.state, two.end), (RunState::Ended, Some(200)));
    let three = s.ledger().get(3, 0).expect("run");
    assert_eq!(
        (three.state, three.start, three.end),
        (RunState::Ended, None, Some(200))
    );
    assert_eq!(
        s.ledger().get(1, 0).map(|r| r.state),
        Some(RunState::Running)
    );
    // Job 1's id now belongs to another submission: the old run closes at 500.
    assert_eq!(live(&mut s, 800, &[(1, 700)]), 1);
    assert_eq!(s.ledger().get(1, 0).and_then(|r| r.end), Some(500));
    // Charged: job 1 100..500 and job 2 105..200, 2 GPUs each; job 3 nothing.
    let u = s.ledger().usage(1000, 10_000);
    let total: i128 = u.charged.iter().map(|r| r.3).sum();
    assert_eq!(total, 2 * (400 + 95));
    // A run first seen after the set was collected is left alone.
    sync_one(
        &mut s,
        job_run(9, 900, "a", RunState::Running, Some(905)),
        910,
    );
    assert_eq!(live(&mut s, 850, &[]), 0);
}

/// A live set collected before the newest applied one (a request buffered
/// while budgetd hung, handled late) closes nothing and does not move the
/// time forgotten runs are closed at.
#[test]
fn a_stale_live_set_is_ignored() {
    let (_d, mut s) = store();
    sync_one(
        &mut s,
        job_run(5, 90, "a", RunState::Running, Some(100)),
        110,
    );
    assert_eq!(live(&mut s, 300, &[(5, 90)]), 0);
    assert_eq!(live(&mut s, 200, &[]), 0, "stale: collected before 300");
    assert_eq!(
        s.ledger().get(5, 0).map(|r| r.state),
        Some(RunState::Running)
    );
    assert_eq!(live(&mut s, 400, &[]), 1);
    assert_eq!(s.ledger().get(5, 0).and_then(|r| r.end), Some(300));
}

/// A cancel racing a requeue makes Slurm report run 1
/// with run 0's start; it ends run 0 (charged once), a resend changes
/// nothing, and a real run 1 (its own, later start) stays a run of its own.
#[test]
fn a_cancel_racing_a_requeue_ends_the_run_it_started() {
    let (_d, mut s) = store();
    sync_one(
        &mut s,
        job_run(5, 470, "bio", RunState::Running, Some(472)),
        473,
    );
    let mut raced = job_run(5, 470, "bio", RunState::Ended, Some(472));
    raced.run = 1;
    raced.end = Some(476);
    assert_eq!(sync_one(&mut s, raced.clone(), 477).updated, 1);
    assert_eq!(sync_one(&mut s, raced, 478).unchanged, 1);
    let runs = s.ledger().job_runs(5);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(
        (runs[0].run, runs[0].state, runs[0].end),
        (0, RunState::Ended, Some(476))
    );
    let u = s.ledger().usage(1000, 10_000);
    assert_eq!(u.charged.iter().map(|r| r.3).sum::<i128>(), 2 * 4);
    // A requeue that completed: run 1 starts later, a row of its own.
    sync_one(
        &mut s,
        job_run(6, 470, "bio", RunState::Running, Some(480)),
        481,
    );
    let mut requeued = job_run(6, 470, "bio", RunState::Requeued, Some(480));
    requeued.end = Some(490);
    sync_one(&mut s, requeued, 491);
    let mut second = job_run(6, 491, "bio", RunState::Ended, Some(500));
    second.run = 1;
    second.end = Some(510);
    assert_eq!(sync_one(&mut s, second, 511).inserted, 1);
    assert_eq!(s.ledger().job_runs(6).len(), 2);
}

/// A sync batch of `runs` collected at `at` (no live set).
fn sync_at(s: &mut Store, at: i64, runs: Vec<JobRun>) -> SyncOutcome {
    s.sync(
        &JobSync {
            collected_at: at,
            runs,
            live: None,
            queue: None,
        },
        at,
    )
    .expect("sync")
}

/// The GPU-seconds charged over everything stored.
fn charged(s: &Store) -> i128 {
    s.ledger()
        .usage(100_000, 100_000)
        .charged
        .iter()
        .map(|r| r.3)
        .sum()
}

/// A job saved by slurmctld while pending starts (budgetd stores the start),
/// slurmctld is killed (-9) before its state save records the start, reloads the
/// job as pending (same id, run 0 and submit time) and starts it again. The
/// reports budgetd receives, in order, then every one of them again: the first
/// run stays charged, closed at the last complete live set that had it running,
/// the second run is a row of its own, and repeats (even the stale ones from
/// before the kill) change nothing.
#[test]
fn a_run_slurmctld_lost_in_a_crash_stays_charged_and_the_next_is_its_own_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lost.db");
    let mut s = Store::open(&path, &PolicyPatch::default()).expect("open");
    let pending = job_run(7, 90, "bio", RunState::Pending, None);
    let first = job_run(7, 90, "bio", RunState::Running, Some(110));
    let second = job_run(7, 90, "bio", RunState::Running, Some(148));
    let mut ended = second.clone();
    ended.state = RunState::Ended;
    ended.end = Some(158);
    // Before the kill: pending (saved so by slurmctld), then running from 110,
    // in a complete live set at 124; killed at 128.
    let mut reports: Vec<(i64, Option<JobRun>)> = vec![
        (100, Some(pending.clone())),
        (100, None),
        (112, Some(first.clone())),
        (124, None),
        // Restarted from the save: pending again, then running again, then done.
        (140, Some(pending.clone())),
        (140, None),
        (150, Some(second.clone())),
        (152, None),
        (160, Some(ended.clone())),
    ];
    for (at, r) in &reports {
        match r {
            Some(r) => {
                sync_at(&mut s, *at, vec![r.clone()]);
            }
            None => {
                live(&mut s, *at, &[(7, 90)]);
            }
        }
    }
    let want = |s: &Store| {
        let runs = s.ledger().job_runs(7);
        let got: Vec<_> = runs
            .iter()
            .map(|r| (r.run, r.submit, r.start, r.end, r.state))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 90, Some(110), Some(124), RunState::Ended),
                (0, 90, Some(148), Some(158), RunState::Ended),
            ],
            "{runs:?}"
        );
        assert_eq!(charged(s), 2 * (124 - 110) + 2 * (158 - 148));
        assert_eq!(s.count_runs_in_db().expect("count"), 2);
    };
    want(&s);
    // Every report again, in order, and the stale ones from before the kill
    // once more at the end (a request handled late): nothing changes.
    reports.push((100, Some(pending)));
    reports.push((112, Some(first)));
    for (at, r) in reports {
        if let Some(r) = r {
            let out = sync_at(&mut s, at, vec![r]);
            assert_eq!((out.inserted, out.updated), (0, 0), "{out:?}");
        }
    }
    want(&s);
    // An import of the second run (as from sacct: no rerun) is that row, not a
    // conflict with the first.
    let imported = RunRecord::from_job_run(&ended, 200).expect("valid");
    let out = s.ingest(&[imported], "import", true).expect("import");
    assert!(out.refused.is_empty() && out.unchanged == 1, "{out:?}");
    want(&s);
    drop(s);
    let s = Store::open(&path, &PolicyPatch::default()).expect("reopen");
    want(&s);
}

/// The same crash when the restarted slurmctld starts the job again before
/// the plugin's first pass (no pending report in between: a running report
/// with a later start), and when the lost run's end had been reported before
/// the crash: each run is a row of its own, charged once.
#[test]
fn a_lost_run_started_again_without_a_pending_report_is_a_row_of_its_own() {
    let (_d, mut s) = store();
    sync_at(
        &mut s,
        112,
        vec![job_run(8, 90, "bio", RunState::Running, Some(110))],
    );
    live(&mut s, 124, &[(8, 90)]);
    sync_at(
        &mut s,
        150,
        vec![job_run(8, 90, "bio", RunState::Running, Some(148))],
    );
    let runs = s.ledger().job_runs(8);
    let got: Vec<_> = runs.iter().map(|r| (r.start, r.end, r.state)).collect();
    assert_eq!(
        got,
        vec![
            (Some(110), Some(124), RunState::Ended),
            (Some(148), None, RunState::Running)
        ],
        "{runs:?}"
    );
    // Ended and reported, then lost: the job runs again under the same key.
    let mut done = job_run(9, 90, "bio", RunState::Ended, Some(110));
    done.end = Some(120);
    sync_at(&mut s, 121, vec![done.clone()]);
    sync_at(
        &mut s,
        140,
        vec![job_run(9, 90, "bio", RunState::Pending, None)],
    );
    let mut again = job_run(9, 90, "bio", RunState::Ended, Some(148));
    again.end = Some(150);
    sync_at(&mut s, 151, vec![again.clone()]);
    assert_eq!(sync_at(&mut s, 152, vec![done, again]).unchanged, 2);
    let runs = s.ledger().job_runs(9);
    let got: Vec<_> = runs.iter().map(|r| (r.start, r.end, r.state)).collect();
    assert_eq!(
        got,
        vec![
            (Some(110), Some(120), RunState::Ended),
            (Some(148), Some(150), RunState::Ended)
        ],
        "{runs:?}"
    );
}

/// An import of a run whose id is stored as another job is a conflict,
/// never "unchanged": job ids are reused.
#[test]
fn an_import_conflict_is_reported_not_dropped() {
    let (_d, mut s) = store();
    sync_one(
        &mut s,
        job_run(4, 900, "bio", RunState::Running, Some(1000)),
        1100,
    );
    let mut other =
        RunRecord::from_job_run(&job_run(4, 0, "filler", RunState::Ended, Some(3000)), 4000)
            .expect("valid");
    other.submit = 0;
    other.end = Some(3600);
    let out = s.ingest(&[other.clone()], "import", true).expect("ingest");
    assert_eq!((out.inserted, out.updated, out.unchanged), (0, 0, 0));
    assert_eq!(out.refused.len(), 1, "{out:?}");
    let why = &out.refused[0].error;
    assert!(
        why.contains("account filler (stored bio)") && why.contains("start 3000 (stored 1000)"),
        "{why}"
    );
    assert_eq!(s.ledger().get(4, 0).map(|r| r.account), Some("bio".into()));
    // The same run as stored (same account, user, size and start) is not one.
    let mut same = other;
    same.account = "bio".into();
    same.user = "bio-user".into();
    same.start = Some(1000);
    let out = s.ingest(&[same], "import", true).expect("ingest");
    assert!(out.refused.is_empty() && out.updated == 1, "{out:?}");
}

fn acct(name: &str, parent: Option<&str>, alloc: f64) -> NewAccount {
    NewAccount {
        name: name.into(),
        parent: parent.map(Into::into),
        allocation_gpu_hours: alloc,
        overcommit: false,
    }
}

#[test]
fn bad_mutations_change_nothing_and_good_ones_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.db");
    {
        let mut s = Store::open(&path, &PolicyPatch::default()).expect("open");
        s.create_account("t", acct("a", None, 100.0), 1).expect("a");
        s.create_account("t", acct("a1", Some("a"), 60.0), 1)
            .expect("a1");
        let g = s.generation();
        assert!(matches!(
            s.create_account("t", acct("a", None, 1.0), 2),
            Err(AppError::Conflict(_))
        ));
        assert!(matches!(
            s.create_account("t", acct("x", Some("zz"), 1.0), 2),
            Err(AppError::Invalid(_))
        ));
        assert!(matches!(
            s.create_account("t", acct("a2", Some("a"), 50.0), 2),
            Err(AppError::Invalid(_))
        ));
        let cyc = AccountPatch {
            parent: Some("a1".into()),
            ..Default::default()
        };
        assert!(matches!(
            s.modify_account("t", "a", cyc, 2),
            Err(AppError::Invalid(_))
        ));
        assert!(matches!(
            s.delete_account("t", "a", 2),
            Err(AppError::Conflict(_))
        ));
        assert_eq!(s.generation(), g);
        assert_eq!(s.audit_log(0, 100).expect("audit").len(), 2);
    }
    let s = Store::open(&path, &PolicyPatch::default()).expect("reopen");
    assert_eq!(s.tree().accounts.len(), 2);
    assert_eq!(s.generation(), 2);
}

#[test]
fn delete_takes_members_and_coordinators_along() {
    let (_d, mut s) = store();
    s.create_account("t", acct("a", None, 10.0), 1).expect("a");
    s.add_member(
        "t",
        MemberSpec {
            user: "u".into(),
            account: "a".into(),
            allocation_gpu_hours: None,
        },
        1,
    )
    .expect("member");
    s.add_coordinator(
        "t",
        Coordinator {
            user: "c".into(),
            account: "a".into(),
        },
        1,
    )
    .expect("coord");
    s.delete_account("t", "a", 2).expect("delete");
    assert!(s.tree().members.is_empty());
    assert!(s.coordinators().is_empty());
}

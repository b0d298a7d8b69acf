//! The web view in a real browser: headless Chromium driven through
//! chromedriver (Debian's `chromium` and `chromium-driver` packages) over
//! the W3C WebDriver protocol, spoken with `budget-client`. A reader logs
//! in through the form, follows every page, sees the figures of
//! `GET /v1/share`, with no console error; a user's queue shows no other
//! team's job. A reader runs a what-if through the form with the real
//! `budgetctl` (built by the test, `cargo build -p budgetctl` in this
//! build's profile and target folder), follows its page until the result
//! renders, and reads the "as it was" figures `budgetctl whatif --json`
//! prints for the same range and change. Screenshots of each page are kept under
//! `$CARGO_TARGET_DIR/ui-screenshots/` (default `target/`).
//!
//! Ignored by default (it needs the two packages): run it with
//! `cargo test -p budget-service --test service ui_browser -- --ignored`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use budget_client::{Client, Endpoint};
use serde_json::{Value, json};

use crate::common::*;

/// The key WebDriver names an element by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver on a free local port, killed on drop.
struct Driver {
    child: Child,
    client: Client,
}

impl Driver {
    fn start() -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver not found: apt-get install chromium chromium-driver");
        let client =
            Client::new(Endpoint::parse(&format!("http://127.0.0.1:{port}")).expect("endpoint"))
                .with_timeout(Duration::from_secs(60))
                .with_max_body(64 << 20);
        let mut d = Driver { child, client };
        let until = Instant::now() + Duration::from_secs(20);
        while d.call("GET", "/status", None).get("ready") != Some(&json!(true)) {
            assert!(Instant::now() < until, "chromedriver did not get ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    /// A WebDriver call; its `value` (`Null` when the driver is not up yet).
    fn call(&mut self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("encode"));
        match self.client.request(
            method,
            path,
            &[("Content-Type", "application/json")],
            bytes.as_deref(),
        ) {
            Ok(r) => {
                let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
                assert!(r.status == 200, "{method} {path}: {} {v}", r.status);
                v["value"].clone()
            }
            Err(e) => {
                eprintln!("{method} {path}: {e}");
                Value::Null
            }
        }
    }

    /// A headless Chromium session with the browser's console log kept.
    fn session(&mut self) -> Session<'_> {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1200,900"]
            },
            "goog:loggingPrefs": {"browser": "ALL"}
        }}});
        let v = self.call("POST", "/session", Some(&caps));
        let id = v["sessionId"].as_str().expect("session id").to_string();
        Session { driver: self, id }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One browser; closed on drop.
struct Session<'d> {
    driver: &'d mut Driver,
    id: String,
}

impl Session<'_> {
    fn call(&mut self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let p = format!("/session/{}{path}", self.id);
        self.driver.call(method, &p, body)
    }

    fn go(&mut self, url: &str) {
        self.call("POST", "/url", Some(&json!({ "url": url })));
    }

    fn url(&mut self) -> String {
        self.call("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn title(&mut self) -> String {
        self.call("GET", "/title", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The elements matching a CSS selector.
    fn find(&mut self, css: &str) -> Vec<String> {
        let v = self.call(
            "POST",
            "/elements",
            Some(&json!({"using": "css selector", "value": css})),
        );
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e[ELEMENT].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn text(&mut self, element: &str) -> String {
        let v = self.call("GET", &format!("/element/{element}/text"), None);
        v.as_str().unwrap_or_default().to_string()
    }

    /// An attribute of an element (empty when it has none).
    fn attr(&mut self, element: &str, name: &str) -> String {
        let v = self.call("GET", &format!("/element/{element}/attribute/{name}"), None);
        v.as_str().unwrap_or_default().to_string()
    }

    fn click(&mut self, element: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/click"),
            Some(&json!({})),
        );
    }

    /// Types `text` into a field.
    fn type_into(&mut self, element: &str, text: &str) {
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            Some(&json!({ "text": text })),
        );
    }

    /// Types `token` into the login form and submits it with the keyboard.
    fn login(&mut self, token: &str) {
        let field = self.find("#token").pop().expect("token field");
        self.call(
            "POST",
            &format!("/element/{field}/value"),
            Some(&json!({ "text": format!("{token}\u{E007}") })),
        );
        // Enter submits the form, but WebDriver's send-keys does not wait for
        // the navigation it starts: on a loaded machine the URL read next was
        // still the login page's.
        self.wait_for(|url| !url.ends_with("/ui/login"));
    }

    /// Waits (bounded) until the browser's URL satisfies `done`: a form's
    /// submission, by key or by click, may still be in flight when WebDriver
    /// answers, and the next navigation would then overtake it.
    fn wait_for(&mut self, done: impl Fn(&str) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !done(&self.url()) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    fn screenshot(&mut self, name: &str) {
        let v = self.call("GET", "/screenshot", None);
        let png = base64(v.as_str().expect("screenshot"));
        assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
        let dir = artifacts();
        std::fs::create_dir_all(&dir).expect("artifacts dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }

    /// The console's errors since the last call.
    fn console_errors(&mut self) -> Vec<String> {
        let v = self.call("POST", "/se/log", Some(&json!({"type": "browser"})));
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let p = format!("/session/{}", self.id);
        let _ = self.driver.client.request("DELETE", &p, &[], None);
    }
}

/// Where the screenshots go.
fn artifacts() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")),
            PathBuf::from,
        )
        .join("ui-screenshots")
}

/// Standard base64 (WebDriver's screenshots).
fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for v in s.bytes().filter_map(val) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[test]
#[ignore = "needs Debian's chromium and chromium-driver; run with --ignored"]
fn a_lead_and_a_user_read_every_page_in_headless_chromium() {
    let s = start();
    let now = budget_service::clock::now();
    crate::ui::setup(&s, now);
    let base = format!("http://{}", s.tcp.expect("tcp"));
    let mut driver = Driver::start();

    // A lead with a reader token: sent to the login page, signs in, reads.
    {
        let mut b = driver.session();
        b.go(&format!("{base}/ui/tree"));
        assert!(b.url().ends_with("/ui/login"), "{}", b.url());
        b.screenshot("login");
        b.login(READER_TOKEN);
        assert!(b.url().ends_with("/ui/tree"), "{}", b.url());
        let (_, share) = call(&s.tcp(Some(READER_TOKEN)), "GET", "/v1/share", None);
        for r in share["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .filter(|r| r["user"].is_null())
        {
            let name = r["account"].as_str().expect("account");
            let row = b
                .find(&format!("tr[data-account=\"{name}\"]"))
                .pop()
                .unwrap_or_else(|| panic!("no row for {name}"));
            let text = b.text(&row);
            let alloc = budget_service::ui::num(r["allocation_gpu_hours"].as_f64().expect("alloc"));
            assert!(text.contains(&alloc), "{name}: {alloc} not in {text:?}");
        }
        for (page, title) in [
            ("tree", "Accounts"),
            ("queue", "Waiting queue"),
            ("preemptions", "Preemptions and idle GPUs"),
            ("drains", "Drains"),
        ] {
            b.go(&format!("{base}/ui/{page}"));
            assert!(b.title().starts_with(title), "{page}: {}", b.title());
            b.screenshot(&format!("reader-{page}"));
            if page == "queue" {
                // A reader sees every team's waiting jobs.
                assert_eq!(b.find("tr[data-job]").len(), 3);
            }
        }
        assert_eq!(b.console_errors(), Vec::<String>::new());
        // Logging out sends back to the login page, and the pages with it.
        let out = b
            .find("form[action=\"/ui/logout\"] button")
            .pop()
            .expect("logout");
        b.call("POST", &format!("/element/{out}/click"), Some(&json!({})));
        b.wait_for(|url| url.ends_with("/ui/login"));
        b.go(&format!("{base}/ui/queue"));
        assert!(b.url().ends_with("/ui/login"), "{}", b.url());
    }

    // A user: her team's waiting jobs, none of the other team's.
    let mut b = driver.session();
    b.go(&format!("{base}/ui/login"));
    b.login(ALICE_TOKEN);
    b.go(&format!("{base}/ui/queue"));
    assert_eq!(b.find("tr[data-job=\"106\"]").len(), 1);
    assert!(b.find("tr[data-job=\"201\"]").is_empty());
    b.screenshot("user-queue");
    assert_eq!(b.console_errors(), Vec::<String>::new());
}

/// The real budgetctl of this test's build: `cargo build -p budgetctl` in
/// the test executable's own profile and target folder (a no-op when it is
/// fresh), so the test never runs a stale or missing one.
fn budgetctl() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // <target>/<profile>/deps/service-HASH
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable's profile folder")
        .to_path_buf();
    let target = profile_dir.parent().expect("target folder");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("profile name");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "budgetctl", "--bin", "budgetctl"])
        .env("CARGO_TARGET_DIR", target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let status = cmd.status().expect("run cargo build -p budgetctl");
    assert!(status.success(), "cargo build -p budgetctl: {status}");
    let bin = profile_dir.join("budgetctl");
    assert!(bin.is_file(), "no {}", bin.display());
    bin
}

/// A contended fortnight on 2 nodes of 8 GPUs: three teams submit
/// whole-node jobs of 5 to 7 hours a little faster than the cluster runs
/// them (demand about 2.1 nodes), scheduled first come, first served, as
/// the ledger records them (ended, running, and the backlog pending).
fn contended(s: &Server, now: i64) {
    let c = s.unix();
    let hours = 3_600;
    // Allocations: GPU-hours per 7-day window, 8, 4 and 4 GPUs' worth.
    for (team, gpus) in [("vision", 8.0), ("nlp", 4.0), ("speech", 4.0)] {
        add_account(&c, team, None, gpus * 168.0);
    }
    let since = now - 14 * 86_400;
    let mut jobs: Vec<(i64, &str, i64)> = Vec::new();
    for (team, every) in [("vision", 6), ("nlp", 10), ("speech", 12)] {
        let mut k = 0;
        while since + k * every * hours < now - hours {
            let length = (5 + k % 3) * hours;
            jobs.push((since + k * every * hours + 60 * (k % 7), team, length));
            k += 1;
        }
    }
    jobs.sort();
    let mut free = [since, since];
    let mut runs = Vec::new();
    for (i, (submit, team, length)) in jobs.into_iter().enumerate() {
        let node = usize::from(free[1] < free[0]);
        let start = free[node].max(submit);
        let job = 1_000 + i as u32;
        let base = json!({"job_id": job, "run": 0, "account": team, "user": format!("{team}-user"),
                          "gpus": 8, "submit": submit, "time_limit_secs": 8 * hours});
        let mut r = base.as_object().cloned().expect("object");
        if start >= now {
            r.insert("state".into(), json!("pending"));
        } else {
            free[node] = start + length;
            r.insert("start".into(), json!(start));
            r.insert("nodes".into(), json!(format!("n{}", node + 1)));
            if start + length <= now {
                r.insert("state".into(), json!("ended"));
                r.insert("end".into(), json!(start + length));
            } else {
                r.insert("state".into(), json!("running"));
            }
        }
        runs.push(Value::Object(r));
    }
    let (st, b) = call(
        &c,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": now, "runs": runs})),
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["refused"].as_array().map_or(0, Vec::len), 0, "{b}");
}

#[test]
#[ignore = "needs Debian's chromium and chromium-driver; run with --ignored"]
fn a_lead_runs_a_whatif_in_headless_chromium() {
    use budget_service::ui::{hours, num, pct};
    let bin = budgetctl();
    let cfg = format!(
        "{}\n[whatif]\nbudgetctl = \"{}\"\n",
        config_text(),
        bin.display()
    );
    let s = Server::start_with_cluster(&cfg, 16);
    contended(&s, budget_service::clock::now());
    let base = format!("http://{}", s.tcp.expect("tcp"));
    let mut driver = Driver::start();
    let mut b = driver.session();
    b.go(&format!("{base}/ui/login"));
    b.login(READER_TOKEN);
    b.go(&format!("{base}/ui/whatif"));
    assert!(b.title().starts_with("What if"), "{}", b.title());
    let option = b.find("option[value=\"vision\"]").pop().expect("vision");
    b.click(&option);
    let change = b.find("#change").pop().expect("change field");
    b.type_into(&change, "+50%");
    b.screenshot("reader-whatif-form");
    let submit = b
        .find("form[action=\"/ui/whatif\"] button")
        .pop()
        .expect("submit");
    b.click(&submit);
    b.wait_for(|url| url.contains("/ui/whatif/"));
    // Its page follows the replay, refreshing itself, until the result.
    let deadline = Instant::now() + Duration::from_secs(300);
    while b.find("svg.p").is_empty() {
        let failed = b.find("p.error");
        if let Some(e) = failed.first() {
            panic!("the what-if failed: {}", b.text(e));
        }
        assert!(
            Instant::now() < deadline,
            "no result after 300 s: {}",
            b.url()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(b.url().contains("/ui/whatif/"), "{}", b.url());
    b.screenshot("reader-whatif-result");

    // The same range and change through budgetctl over HTTP: the page's
    // "as it was" figures are its.
    let range = b.find("p[data-until]").pop().expect("the range");
    let until = b.attr(&range, "data-until");
    let since = b.attr(&range, "data-since");
    let weeks = (until.parse::<i64>().expect("until") - since.parse::<i64>().expect("since"))
        / (7 * 86_400);
    assert_eq!(weeks, 4, "the form's default");
    let out = Command::new(&bin)
        .args([
            "--url",
            &base,
            "--token",
            READER_TOKEN,
            "whatif",
            "--at",
            &until,
        ])
        .args(["--weeks", "4", "--set", "vision=+50%", "--json"])
        .env("TZ", "UTC")
        .env_remove("BUDGET_TOKEN_FILE")
        .env_remove("BUDGET_SOCKET")
        .output()
        .expect("run budgetctl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("budgetctl --json");
    let teams = v["teams"].as_array().expect("teams");
    assert_eq!(teams.len(), 3, "{v}");
    for t in teams {
        let name = t["team"].as_str().expect("team");
        let cells: Vec<String> = b
            .find(&format!(
                "tbody[data-team=\"{name}\"] tr[data-case=\"was\"] td"
            ))
            .iter()
            .map(|e| b.text(e))
            .collect();
        let f = &t["as_it_was"];
        let x = |k: &str| f[k].as_f64().unwrap_or_else(|| panic!("{name}: {k}"));
        let want = vec![
            num(t["allocation_gpu_hours"].as_f64().expect("allocation")),
            pct(x("entitlement_shortfall")),
            hours(f["wait_p50_hours"].as_f64()),
            hours(f["wait_p95_hours"].as_f64()),
            f["preemptions"].to_string(),
            num(x("lost_gpu_hours")),
            num(x("gpu_hours")),
        ];
        assert_eq!(cells, want, "{name}: as it was");
    }
    // One chart, both cases side by side for every team (and the legend).
    assert_eq!(b.find("svg.p").len(), 1);
    assert_eq!(b.find("svg.p rect.w").len(), teams.len() + 1);
    assert_eq!(b.find("svg.p rect.n").len(), teams.len() + 1);
    assert!(b.find("svg.p title").len() == 1);
    assert_eq!(b.console_errors(), Vec::<String>::new());
}

//! Slurm version detection and the version -> `cfg` mapping.
//!
//! Owns the single table of which `slurm_*` cfgs a Slurm release enables. Pure and
//! dependency-free because `build.rs` includes this file with `#[path]` (so build
//! script and library cannot disagree) and unit tests check the matrix.
//!
//! Each cfg means "at least this release": a 24.05 build has `slurm_22_05`,
//! `slurm_23_02`, `slurm_23_11_6` and `slurm_24_05`, but not `slurm_25_05`.

/// Encode a release like Slurm's `SLURM_VERSION_NUM(a, b, c)` macro.
pub const fn version_num(major: u32, minor: u32, micro: u32) -> u32 {
    (major << 16) + (minor << 8) + micro
}

/// Every cfg this crate may emit, each with the first release it applies to.
/// Keep in sync with the API tables in `../shared/SLURM-NOTES.md`.
pub const CFG_TABLE: &[(&str, u32)] = &[
    ("slurm_22_05", version_num(22, 5, 0)),
    ("slurm_23_02", version_num(23, 2, 0)),
    // priority_p_thread_start appeared in 23.11.6 (a micro release).
    ("slurm_23_11_6", version_num(23, 11, 6)),
    // get_priority_factors_list lost its req_msg argument in 24.05.
    ("slurm_24_05", version_num(24, 5, 0)),
    // preempt_p_get_data split into get_prio/get_mode/get_grace_time in 25.05.
    ("slurm_25_05", version_num(25, 5, 0)),
    // priority_p_calc_fs_factor removed in 25.11.
    ("slurm_25_11", version_num(25, 11, 0)),
    // priority_factors_object_t names its job by `slurm_step_id_t step_id` (job_id and
    // sluid) instead of `uint32_t job_id` (slurm/slurm.h of 26.05; 24.11 has job_id).
    ("slurm_26_05", version_num(26, 5, 0)),
];

/// Cfgs detected from the source tree's headers rather than from the version number,
/// each with the text that turns it on in `slurm/slurm.h` or in the header holding
/// `job_record_t` (`src/slurmctld/slurmctld.h`; `src/common/job_record.h` where it
/// exists). Used where the release a
/// change came with is not in this project (no source of 23.02-24.05 here).
pub const DETECTED_CFGS: &[(&str, &str)] = &[
    // sprio's factors moved from priority_factors_object_t's own fields into a separate
    // priority_factors_t it points to (22.05: inline; 24.11 and 26.05: pointer).
    ("slurm_prio_factors_t", "priority_factors_t *prio_factors;"),
    // multifactor's per-partition priorities moved from job_record_t's own
    // `priority_array` into a priority_mult_t the record points to (22.05: inline;
    // 24.11: `part_prio`; 25.11 and 26.05: `prio_mult`).
    ("slurm_part_prio", "priority_mult_t *part_prio;"),
    ("slurm_prio_mult", "priority_mult_t *prio_mult;"),
];

/// The detected cfgs that `headers` (the text of the headers [`DETECTED_CFGS`] names,
/// one after the other) turns on.
pub fn detected_cfgs(headers: &str) -> Vec<&'static str> {
    DETECTED_CFGS
        .iter()
        .filter(|(_, needle)| headers.contains(needle))
        .map(|(name, _)| *name)
        .collect()
}

/// The oldest release the bindings support.
pub const MIN_SUPPORTED: u32 = version_num(22, 5, 0);

/// The set of cfg names enabled for `version` (a `SLURM_VERSION_NUMBER`).
pub fn cfgs_for(version: u32) -> Vec<&'static str> {
    CFG_TABLE
        .iter()
        .filter(|(_, since)| version >= *since)
        .map(|(name, _)| *name)
        .collect()
}

/// Extract `SLURM_VERSION_NUMBER` from the text of `slurm/slurm_version.h`.
///
/// Accepts hex (`0x160508`, the form Slurm's configure writes) or decimal.
pub fn parse_version_header(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != "#define" || words.next()? != "SLURM_VERSION_NUMBER" {
            return None;
        }
        let value = words.next()?.trim_matches(|c| c == '(' || c == ')');
        match value
            .strip_prefix("0x")
            .or_else(|| value.strip_prefix("0X"))
        {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => value.parse().ok(),
        }
    })
}

/// `"22.05.8"` for 0x160508.
pub fn version_string(version: u32) -> String {
    format!(
        "{}.{:02}.{}",
        (version >> 16) & 0xff,
        (version >> 8) & 0xff,
        version & 0xff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: u32) -> Vec<&'static str> {
        cfgs_for(v)
    }

    #[test]
    fn cfg_matrix() {
        let all = [
            "slurm_22_05",
            "slurm_23_02",
            "slurm_23_11_6",
            "slurm_24_05",
            "slurm_25_05",
            "slurm_25_11",
            "slurm_26_05",
        ];
        // (version, how many cfgs from the front of `all` are on)
        let cases = [
            (version_num(22, 5, 8), 1),
            (version_num(22, 5, 0), 1),
            (version_num(23, 2, 7), 2),
            (version_num(23, 11, 5), 2),
            (version_num(23, 11, 6), 3),
            (version_num(23, 11, 10), 3),
            (version_num(24, 5, 0), 4),
            (version_num(24, 11, 3), 4),
            (version_num(25, 5, 1), 5),
            (version_num(25, 11, 0), 6),
            (version_num(25, 11, 4), 6),
            (version_num(26, 5, 5), 7),
        ];
        for (v, n) in cases {
            assert_eq!(set(v), all[..n].to_vec(), "version {}", version_string(v));
        }
        assert!(set(version_num(21, 8, 8)).is_empty());
    }

    #[test]
    fn detects_split_factors() {
        let old = "typedef struct priority_factors_object {\n\tdouble priority_age;\n";
        let new = "\tpriority_factors_t *prio_factors;\n\tchar *qos;\n";
        assert!(detected_cfgs(old).is_empty());
        assert_eq!(detected_cfgs(new), vec!["slurm_prio_factors_t"]);
    }

    #[test]
    fn detects_partition_priorities_behind_a_pointer() {
        let old = "\tuint32_t *priority_array;\t/* partition based priority */\n";
        let new = "\tpriority_mult_t *part_prio;\t/* partition based priority */\n";
        assert!(detected_cfgs(old).is_empty());
        assert_eq!(detected_cfgs(new), vec!["slurm_part_prio"]);
        let newer = "\tpriority_mult_t *prio_mult;\t/* priority based on requested partition\n";
        assert_eq!(detected_cfgs(newer), vec!["slurm_prio_mult"]);
    }

    #[test]
    fn parses_header() {
        let h = "#ifndef _SLURM_VERSION_H_\n#define SLURM_VERSION_NUMBER 0x160508\n\
                 #define SLURM_VERSION_NUM(a,b,c) (((a) << 16) + ((b) << 8) + (c))\n";
        assert_eq!(parse_version_header(h), Some(0x160508));
        assert_eq!(
            parse_version_header("#define SLURM_VERSION_NUMBER 1443080"),
            Some(0x160508)
        );
        assert_eq!(parse_version_header("#define OTHER 1"), None);
        assert_eq!(version_string(0x160508), "22.05.8");
        assert_eq!(version_string(version_num(23, 11, 6)), "23.11.6");
    }
}

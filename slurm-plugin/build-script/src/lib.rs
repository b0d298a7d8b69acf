//! The one build script of the three plugin crates (`[build-dependencies]` of each, whose
//! `build.rs` calls [`reemit_slurm_cfgs`] and nothing else).
//!
//! `slurm-ffi`'s build script detects the `slurm_*` cfgs of the Slurm tree it binds (the
//! table lives in `ffi/src/version.rs`) and publishes them as `links = "slurm"` metadata;
//! cargo hands that metadata only to the build scripts of crates that depend on
//! `slurm-ffi` directly, as `DEP_SLURM_*` variables. Each plugin re-emits the cfgs so it
//! gates its version-specific exports on the same facts as the bindings.

/// Declare every cfg `slurm-ffi` knows (`DEP_SLURM_ALL_CFGS`, for `check-cfg`) and turn on
/// those it detected (`DEP_SLURM_CFGS`); both are comma-separated lists, and a missing
/// variable is an empty list.
///
/// Prints no `rerun-if` line, so cargo keeps its default: the build script reruns when a
/// file of the plugin's package changes, and whenever `slurm-ffi`'s own build script does.
pub fn reemit_slurm_cfgs() {
    let all = std::env::var("DEP_SLURM_ALL_CFGS").unwrap_or_default();
    let on = std::env::var("DEP_SLURM_CFGS").unwrap_or_default();
    for line in cfg_lines(&all, &on) {
        println!("{line}");
    }
}

/// The lines [`reemit_slurm_cfgs`] prints, in order: one `check-cfg` per known name, then
/// one `rustc-cfg` per detected name.
fn cfg_lines(all: &str, on: &str) -> Vec<String> {
    let names = |list: &str| {
        list.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let mut lines: Vec<String> = names(all)
        .into_iter()
        .map(|name| format!("cargo::rustc-check-cfg=cfg({name})"))
        .collect();
    lines.extend(
        names(on)
            .into_iter()
            .map(|name| format!("cargo::rustc-cfg={name}")),
    );
    lines
}

#[cfg(test)]
mod tests {
    use super::cfg_lines;

    #[test]
    fn declares_all_then_enables_detected() {
        assert_eq!(
            cfg_lines("slurm_22_05,slurm_23_02,", "slurm_22_05"),
            [
                "cargo::rustc-check-cfg=cfg(slurm_22_05)",
                "cargo::rustc-check-cfg=cfg(slurm_23_02)",
                "cargo::rustc-cfg=slurm_22_05",
            ]
        );
    }

    #[test]
    fn missing_variables_emit_nothing() {
        assert!(cfg_lines("", "").is_empty());
    }
}

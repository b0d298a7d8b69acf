//! Re-emit the `slurm_*` cfgs that `slurm-ffi`'s build script detected (published as
//! `links = "slurm"` metadata), so this crate gates version-specific exports on the
//! same facts. The table itself lives in `ffi/src/version.rs`.

fn main() {
    let all = std::env::var("DEP_SLURM_ALL_CFGS").unwrap_or_default();
    let on = std::env::var("DEP_SLURM_CFGS").unwrap_or_default();
    for name in all.split(',').filter(|s| !s.is_empty()) {
        println!("cargo::rustc-check-cfg=cfg({name})");
    }
    for name in on.split(',').filter(|s| !s.is_empty()) {
        println!("cargo::rustc-cfg={name}");
    }
}

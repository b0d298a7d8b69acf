//! Re-emit the `slurm_*` cfgs that `slurm-ffi`'s build script detected, so this crate
//! gates version-specific exports on the same facts (`slurm-plugin-build`).

fn main() {
    slurm_plugin_build::reemit_slurm_cfgs();
}

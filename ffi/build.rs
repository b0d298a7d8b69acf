//! Build script of `slurm-ffi`: bindgen over the Slurm source tree in `SLURM_SRC_DIR`.
//!
//! Also reads `SLURM_VERSION_NUMBER` from that tree, emits the `slurm_*` cfgs (see
//! `src/version.rs`) for this crate, and publishes them as `links` metadata
//! (`DEP_SLURM_VERSION`, `DEP_SLURM_CFGS`, `DEP_SLURM_ALL_CFGS`) for the plugin crates.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[path = "src/version.rs"]
#[allow(dead_code)]
mod version;

#[derive(Debug)]
struct IntTypes;

impl bindgen::callbacks::ParseCallbacks for IntTypes {
    // Give Slurm's sentinels the integer types of the fields they are compared with:
    // bindgen would otherwise pick u32 for everything that fits, and an `i64`/`u32`
    // mismatch against a u64 field would silently compile via `as` casts.
    fn int_macro(&self, name: &str, value: i64) -> Option<bindgen::callbacks::IntKind> {
        use bindgen::callbacks::IntKind;
        let kind = match name {
            "NO_VAL8" | "INFINITE8" => IntKind::U8,
            "NO_VAL16" | "INFINITE16" => IntKind::U16,
            "NO_VAL" | "INFINITE" | "NICE_OFFSET" | "SLURM_VERSION_NUMBER" => IntKind::U32,
            // Job state bits are u32 (job_state); job flag bits above 32 are u64 (bitflags).
            n if n.starts_with("JOB_") || n.starts_with("PRIORITY_FLAGS_") => {
                if u32::try_from(value).is_ok() {
                    IntKind::U32
                } else {
                    IntKind::U64
                }
            }
            "NO_VAL64" | "INFINITE64" | "NO_CONSUME_VAL64" => IntKind::U64,
            "SLURM_SUCCESS" | "SLURM_ERROR" => IntKind::Int,
            _ => return None,
        };
        Some(kind)
    }
}

fn fail(msg: &str) -> ! {
    // A panic in build.rs is how cargo shows a build-script error with its message.
    panic!("\n\nslurm-ffi: {msg}\n\n");
}

/// First existing header among `candidates` (paths moved between Slurm releases,
/// e.g. src/common/gres.h -> src/interfaces/gres.h in 23.02).
fn first_existing<'a>(src: &Path, candidates: &[&'a str]) -> Option<&'a str> {
    candidates.iter().copied().find(|c| src.join(c).is_file())
}

fn main() {
    println!("cargo::rerun-if-env-changed=SLURM_SRC_DIR");
    println!("cargo::rerun-if-changed=src/version.rs");
    let src = match env::var_os("SLURM_SRC_DIR") {
        Some(s) if !s.is_empty() => PathBuf::from(s),
        _ => fail(
            "SLURM_SRC_DIR is not set. Run `scripts/setup` (it fetches the Slurm source of the \
             installed version and writes SLURM_SRC_DIR to its env file), then \
             `source /var/cache/slurm-budget/env.sh` or build through scripts/setup.",
        ),
    };
    let version_h = src.join("slurm/slurm_version.h");
    println!("cargo::rerun-if-changed={}", version_h.display());
    let text = std::fs::read_to_string(&version_h).unwrap_or_else(|e| {
        fail(&format!(
            "cannot read {} ({e}); scripts/setup copies it from /usr/include/slurm/",
            version_h.display()
        ))
    });
    let ver = version::parse_version_header(&text).unwrap_or_else(|| {
        fail(&format!(
            "no SLURM_VERSION_NUMBER in {}",
            version_h.display()
        ))
    });
    if ver < version::MIN_SUPPORTED {
        fail(&format!(
            "Slurm {} is older than the oldest supported release 22.05",
            version::version_string(ver)
        ));
    }
    let mut all: Vec<&str> = version::CFG_TABLE.iter().map(|(n, _)| *n).collect();
    all.extend(version::DETECTED_CFGS.iter().map(|(n, _)| *n));
    let mut on = version::cfgs_for(ver);
    let slurm_h = src.join("slurm/slurm.h");
    println!("cargo::rerun-if-changed={}", slurm_h.display());
    let slurm_h_text = std::fs::read_to_string(&slurm_h).unwrap_or_else(|e| {
        fail(&format!(
            "cannot read {} ({e}): is SLURM_SRC_DIR a Slurm source tree?",
            slurm_h.display()
        ))
    });
    // The job record's header is read as text too (optional: a tree without it fails
    // later, at the wrapper, with its own message).
    let mut detect_text = slurm_h_text;
    for h in ["src/slurmctld/slurmctld.h", "src/common/job_record.h"] {
        let path = src.join(h);
        if let Ok(text) = std::fs::read_to_string(&path) {
            println!("cargo::rerun-if-changed={}", path.display());
            detect_text.push_str(&text);
        }
    }
    on.extend(version::detected_cfgs(&detect_text));
    for name in &all {
        println!("cargo::rustc-check-cfg=cfg({name})");
    }
    for name in &on {
        println!("cargo::rustc-cfg={name}");
    }
    println!("cargo::metadata=version={ver}");
    println!("cargo::metadata=cfgs={}", on.join(","));
    println!("cargo::metadata=all_cfgs={}", all.join(","));
    println!("cargo::metadata=src_dir={}", src.display());

    // The wrapper: public API, then the controller internals the plugins touch.
    let mut wrapper = String::from("#include \"config.h\"\n");
    let headers: &[&[&str]] = &[
        &["slurm/slurm.h"],
        &["slurm/slurm_errno.h"],
        &["src/common/log.h"],
        &["src/common/list.h"],
        &["src/common/xmalloc.h"],
        &["src/common/xstring.h"],
        &["src/common/slurm_protocol_defs.h"],
        &["src/interfaces/gres.h", "src/common/gres.h"],
        &["src/common/assoc_mgr.h"],
        &["src/interfaces/priority.h", "src/common/slurm_priority.h"],
        &["src/slurmctld/slurmctld.h"],
        &["src/slurmctld/locks.h"],
        &["src/slurmctld/job_scheduler.h"],
        &["src/interfaces/preempt.h", "src/slurmctld/preempt.h"],
        &["src/interfaces/job_submit.h", "src/slurmctld/job_submit.h"],
    ];
    for alternatives in headers {
        let Some(h) = first_existing(&src, alternatives) else {
            fail(&format!(
                "none of {alternatives:?} found under {}: is SLURM_SRC_DIR a Slurm source tree?",
                src.display()
            ));
        };
        println!("cargo::rerun-if-changed={}", src.join(h).display());
        let _ = writeln!(wrapper, "#include \"{h}\"");
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_else(|| fail("OUT_DIR unset")));
    let wrapper_path = out.join("slurm_wrapper.h");
    if let Err(e) = std::fs::write(&wrapper_path, &wrapper) {
        fail(&format!("cannot write {}: {e}", wrapper_path.display()));
    }

    let types = [
        "job_record_t",
        "job_record",
        "job_details_t",
        "job_details",
        "job_desc_msg_t",
        "job_queue_rec_t",
        "part_record_t",
        "slurmctld_lock_t",
        "lock_level_t",
        "priority_factors_object_t",
        "priority_factors_request_msg_t",
        "gres_state_t",
        "gres_job_state_t",
        "slurmdb_assoc_rec_t",
        "slurmdb_qos_rec_t",
        "assoc_mgr_lock_t",
        "log_level_t",
        "list_t",
        "list_itr_t",
        "List",
        "ListIterator",
        "ListDelF",
        "job_states",
        "slurm_preempt_data_type_t",
        // ESLURM_* return codes (job_submit/budget rejects with ESLURM_INVALID_ACCOUNT etc.).
        "slurm_err_t",
        "uid_t",
        "time_t",
    ];
    let functions = [
        "log_var",
        "list_create",
        "list_destroy",
        "list_append",
        "list_count",
        "list_next",
        "list_iterator_create",
        "list_iterator_destroy",
        "slurm_xcalloc",
        "slurm_xfree",
        "xstrdup",
        "assoc_mgr_lock",
        "assoc_mgr_unlock",
    ];
    let vars = [
        "NO_VAL8",
        "NO_VAL16",
        "NO_VAL",
        "NO_VAL64",
        "NO_CONSUME_VAL64",
        "INFINITE8",
        "INFINITE16",
        "INFINITE",
        "INFINITE64",
        "NICE_OFFSET",
        "SLURM_SUCCESS",
        "SLURM_ERROR",
        "SLURM_VERSION_NUMBER",
        "JOB_.*",
        "PRIORITY_FLAGS_.*",
        // preempt/budget answers PREEMPT_DATA_MODE with these bits.
        "PREEMPT_MODE_.*",
        "slurm_conf",
    ];
    let mut builder = bindgen::Builder::default()
        .header(wrapper_path.to_string_lossy())
        .clang_arg(format!("-I{}", src.display()))
        .clang_arg(format!("-I{}", out.display()))
        .parse_callbacks(Box::new(IntTypes))
        .parse_callbacks(Box::new(
            bindgen::CargoCallbacks::new().rerun_on_header_files(false),
        ))
        // C enums as plain integer constants: a value Slurm adds later must not be UB.
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(true)
        .generate_comments(false)
        // Evaluates macros cexpr cannot (JOB_COMPLETING is `SLURM_BIT(15)`).
        .clang_macro_fallback()
        // ...whose scratch files go to OUT_DIR, not the source tree.
        .clang_macro_fallback_build_dir(&out);
    for t in types {
        builder = builder.allowlist_type(t);
    }
    for f in functions {
        builder = builder.allowlist_function(f);
    }
    for v in vars {
        builder = builder.allowlist_var(v);
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        fail(&format!(
            "bindgen failed on {}: {e}",
            wrapper_path.display()
        ))
    });
    if let Err(e) = bindings.write_to_file(out.join("bindings.rs")) {
        fail(&format!("cannot write bindings.rs: {e}"));
    }
}

//! The real `budget-agent` binary on a machine without NVML (CI has no GPU):
//! it must say so and exit cleanly, or report `nvml: false` in no-GPU mode.
//! On a GPU node the same commands exercise the NVML path.

use std::process::Command;

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_budget-agent"))
}

fn has_nvml() -> bool {
    budget_agent::source::NvmlSource::open().is_ok()
}

#[test]
fn without_nvml_it_explains_and_exits_zero() {
    let out = agent()
        .args(["--once", "--print", "--node", "n1"])
        .output()
        .expect("run budget-agent");
    assert!(out.status.success(), "status {:?}", out.status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if has_nvml() {
        let line = String::from_utf8_lossy(&out.stdout);
        let report: budget_protocol::AgentReport =
            serde_json::from_str(line.trim()).expect("report JSON");
        assert!(report.nvml);
    } else {
        assert!(stderr.contains("NVML unavailable"), "stderr: {stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn no_gpu_mode_reports_nvml_false() {
    let out = agent()
        .args(["--once", "--print", "--no-gpu-mode", "--node", "n1"])
        .output()
        .expect("run budget-agent");
    assert!(out.status.success());
    let line = String::from_utf8_lossy(&out.stdout);
    let report: budget_protocol::AgentReport =
        serde_json::from_str(line.trim()).expect("report JSON");
    assert_eq!(report.node, "n1");
    assert_eq!(report.nvml, has_nvml());
}

#[test]
fn missing_endpoint_is_a_clear_error() {
    let out = agent()
        .args(["--once", "--no-gpu-mode"])
        .env_remove("BUDGET_SOCKET")
        .output()
        .expect("run budget-agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no budgetd endpoint"), "stderr: {stderr}");
}

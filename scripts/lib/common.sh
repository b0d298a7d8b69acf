# shellcheck shell=bash
# Shared shell helpers for scripts/setup, scripts/testbed, scripts/demo and scripts/test.
# Owns: logging helpers, repo-root discovery, the Slurm source cache location, and
# the small env file that setup writes (SLURM_SRC_DIR) so other scripts can source it.

# Repository root (scripts/lib/common.sh -> ../..).
SB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export SB_ROOT

sb_log() { printf '[%s] %s\n' "${SB_PROG:-slurm-budget}" "$*" >&2; }
sb_die() { printf '[%s] ERROR: %s\n' "${SB_PROG:-slurm-budget}" "$*" >&2; exit 1; }

# Where the Slurm source of the installed version is cached. Root uses a system cache
# (shared by every checkout on the machine); others use ~/.cache. Override with
# SLURM_BUDGET_CACHE.
sb_cache_dir() {
    if [[ -n "${SLURM_BUDGET_CACHE:-}" ]]; then
        printf '%s\n' "$SLURM_BUDGET_CACHE"
    elif [[ $(id -u) -eq 0 ]]; then
        printf '%s\n' /var/cache/slurm-budget
    else
        printf '%s\n' "${XDG_CACHE_HOME:-$HOME/.cache}/slurm-budget"
    fi
}

# The env file written by scripts/setup: `SLURM_SRC_DIR=...` and `SLURM_DEB_VERSION=...`.
sb_env_file() { printf '%s/env.sh\n' "$(sb_cache_dir)"; }

# Load SLURM_SRC_DIR from the env file unless the caller already exported one.
sb_load_env() {
    local f
    f="$(sb_env_file)"
    if [[ -z "${SLURM_SRC_DIR:-}" && -r "$f" ]]; then
        # shellcheck disable=SC1090
        source "$f"
    fi
    export SLURM_SRC_DIR="${SLURM_SRC_DIR:-}"
}

# Installed Slurm package version (Debian version string), empty if not installed.
sb_slurm_deb_version() {
    dpkg-query -W -f='${Version}' slurmctld 2>/dev/null || true
}

# Slurm's plugin directory on Debian amd64.
SB_SYSTEM_PLUGIN_DIR=/usr/lib/x86_64-linux-gnu/slurm-wlm

# Plugins this workspace builds: "<cargo lib name>:<slurm plugin file name>".
# The testbed and --install-plugins copy target/release/lib<lib>.so to <file>.
SB_PLUGINS=(
    "priority_budget:priority_budget.so"
    "job_submit_budget:job_submit_budget.so"
    "preempt_budget:preempt_budget.so"
    "site_factor_budget:site_factor_budget.so"
)

# Renders a slurm-conf/ template: replaces every @KEY@ with its value and refuses to
# write a file with a placeholder left (the testbed and the Docker testbed share it).
render() { # template out, then KEY=VALUE pairs
    local tmpl="$1" out="$2"; shift 2
    python3 - "$tmpl" "$out" "$@" <<'PY'
import sys
tmpl, out, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
text = open(tmpl).read()
for p in pairs:
    k, v = p.split("=", 1)
    text = text.replace("@" + k + "@", v)
import re
left = sorted(set(re.findall(r"@[A-Z][A-Z_]+@", text)))
if left:
    sys.exit("unsubstituted placeholders in %s: %s" % (tmpl, " ".join(left)))
open(out, "w").write(text)
PY
}

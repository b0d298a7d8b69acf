# shellcheck shell=bash
# Check helpers shared by the integration test scripts (test-slurm, test-contract,
# test-drain): one line per check ("ok"/"FAIL"), counters, and a closing line
# "N passed, M failed" that CI reads like any test runner's summary.

SB_PASSES=0
FAILS=0
pass() { printf '  ok    %s\n' "$*"; SB_PASSES=$((SB_PASSES + 1)); }
fail() { printf '  FAIL  %s\n' "$*"; FAILS=$((FAILS + 1)); }
check() { local what="$1"; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
# wait_for SECONDS CMD...: polls CMD every 0.2 s until it succeeds or time runs out.
wait_for() { local t="$1" i; shift; for ((i = 0; i < t * 5; i++)); do "$@" && return 0; sleep 0.2; done; return 1; }

# checks_summary NAME HINT: prints the closing line and exits 1 if any check failed.
checks_summary() {
    echo
    printf '%s: %d passed, %d failed\n' "$1" "$SB_PASSES" "$FAILS"
    if ((FAILS)); then
        sb_log "$FAILS check(s) failed; $2"
        exit 1
    fi
}

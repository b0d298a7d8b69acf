# shellcheck shell=bash
# docker-slurm-testbed/lib/testbed.sh — names, tokens and helpers shared by up, down, tb
# and smoke. Sourced; sources scripts/lib/common.sh and lib/image.sh.
#
# Names: every image, container, network and volume starts with $SB_DOCKER_PREFIX
# (default sbtb), the compose project name, so testbeds of several checkouts coexist and
# `down` removes only its own.

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/image.sh"

TB_PROJECT="${SB_DOCKER_PREFIX:-sbtb}"
TB_BASE="$TB_PROJECT-slurm"
TB_IMAGE="$TB_PROJECT-testbed"
TB_STATE="$SB_ROOT/target/docker-testbed"
TB_CONTEXT="$TB_STATE/context"
TB_ENV="$TB_STATE/compose.env"
TB_COMPOSE_FILE="$SB_ROOT/docker-slurm-testbed/compose.yaml"
# What the base image holds: systemd (the package tests boot it), Slurm, munge, tools.
TB_BASE_PACKAGES=(systemd systemd-sysv dbus adduser procps iproute2 curl ca-certificates less
                  slurmctld slurmd slurm-client munge sqlite3 jq)
mkdir -p "$TB_STATE"

# docker-compose v1 (Debian's package) or the v2 plugin, whichever exists.
tb_compose() {
    local env=()
    [[ -f "$TB_ENV" ]] && env=(--env-file "$TB_ENV")
    if command -v docker-compose >/dev/null; then
        docker-compose -p "$TB_PROJECT" -f "$TB_COMPOSE_FILE" "${env[@]}" "$@"
    else
        docker compose -p "$TB_PROJECT" -f "$TB_COMPOSE_FILE" "${env[@]}" "$@"
    fi
}

# The container of a service (compose v1 names PROJECT_SERVICE_1, v2 PROJECT-SERVICE-1).
tb_container() { tb_compose ps -q "$1" 2>/dev/null | head -n1; }
tb_exec() { local s="$1"; shift; docker exec "$(tb_container "$s")" "$@"; }

tb_wait() { # WHAT SECONDS SHELL-CONDITION
    local what="$1" secs="$2" cond="$3" i
    for ((i = 0; i < secs * 2; i++)); do
        eval "$cond" && { sb_log "$what"; return 0; }
        sleep 0.5
    done
    sb_die "timed out after ${secs} s waiting for: $what"
}

# Random tokens, written once per testbed; TB_LINK decided from the built plugins.
tb_write_env() {
    local link="${TB_LINK:-}"
    if [[ -z "$link" ]]; then
        # The plugins can send a token only if their settings parser knows the key.
        if grep -aq budget_token_file "$SB_ROOT/target/release/libpriority_budget.so" 2>/dev/null; then
            link=tcp
        else
            link=socket
            sb_log "the plugins have no budget_token_file option yet: they reach budgetd through its socket on a shared volume (TB_LINK=socket); see docker-slurm-testbed/README.md"
        fi
    fi
    if [[ ! -f "$TB_ENV" ]]; then
        {
            printf 'TB_ADMIN_TOKEN=%s\n' "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
            printf 'TB_READER_TOKEN=%s\n' "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
            printf 'TB_AGENT_TOKEN=%s\n' "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
        } >"$TB_ENV"
        chmod 0600 "$TB_ENV"
    fi
    sed -i '/^TB_IMAGE=/d; /^TB_LINK=/d; /^TB_NODES=/d' "$TB_ENV"
    printf 'TB_IMAGE=%s\nTB_LINK=%s\nTB_NODES=4\n' "$TB_IMAGE" "$link" >>"$TB_ENV"
    TB_LINK="$link"
}

tb_env() { sed -n "s/^$1=//p" "$TB_ENV"; }

#!/usr/bin/env bash
# Entry point of the Docker testbed image (slurm-budget's Debian packages installed).
# Roles:
#   budgetd     budgetd as installed by the package, listening on TCP :8700 with the
#               tokens of .env (admin for the controller, reader for Prometheus, agent
#               for the nodes) and on its socket /run/slurm-budget/budgetd.sock
#   ctl         renders slurm.conf/gres.conf from slurm-conf/*.in into /shared/etc, then
#               runs slurmctld with priority/budget, preempt/budget, job_submit/budget
#               (from the plugin package, in Debian's PluginDir), reaching budgetd at
#               http://budgetd:8700 with the admin token (TB_LINK=tcp) or through the
#               shared socket folder (TB_LINK=socket)
#   node NAME   8 fake GPUs (character devices), budget-agent --no-gpu-mode over TCP with
#               the agent token, and slurmd -N NAME
#   shell | CMD anything else runs with SLURM_CONF set
set -euo pipefail
SB_PROG=docker-testbed
source /opt/slurm-budget/scripts/lib/common.sh
NODES="${TB_NODES:-4}" GPUS="${TB_GPUS:-8}" GPU_TYPE="${TB_GPU_TYPE:-h100}"
export SLURM_CONF=/shared/etc/slurm.conf
mkdir -p /shared/etc /var/spool/slurm /var/log/slurm /run/slurm /run/slurm-budget

# scripts/lib/common.sh's render() in bash: the image has no python3. Replaces every
# @KEY@ and refuses to write a file with a placeholder left.
render() { # template out KEY=VALUE...
    local text out="$2" kv left
    text="$(<"$1")"; shift 2
    for kv in "$@"; do text="${text//@${kv%%=*}@/${kv#*=}}"; done
    left="$(grep -oE '@[A-Z][A-Z_]+@' <<<"$text" | sort -u | tr '\n' ' ' || true)"
    [[ -z "$left" ]] || sb_die "unsubstituted placeholders: $left"
    printf '%s\n' "$text" >"$out"
}

wait_for() { local i; for ((i = 0; i < 600; i++)); do eval "$1" && return 0; sleep 0.2; done; sb_die "timed out: $1"; }

case "${1:-shell}" in
budgetd)
    # Tokens for TCP callers (budgetd.toml's format: budget-service/src/config.rs).
    cat >/etc/slurm-budget/budgetd.toml <<EOF
snapshot_refresh_secs = 5
[[tokens]]
token = "$TB_ADMIN_TOKEN"
user = "slurmctld"
role = "controller"
[[tokens]]
token = "$TB_READER_TOKEN"
user = "prometheus"
role = "reader"
[[tokens]]
token = "$TB_AGENT_TOKEN"
user = "gpu-nodes"
role = "agent"
nodes = [$(for ((i = 1; i <= ${NODES:-2}; i++)); do printf '"gpu%d",' "$i"; done)]
EOF
    chmod 0640 /etc/slurm-budget/budgetd.toml
    rm -f /run/slurm-budget/budgetd.sock
    # As root here: with auth/none slurmctld trusts the caller's uid, and drains need
    # an operator (the package's unit runs budgetd as `slurm`, SlurmUser on real sites).
    exec budgetd --db /var/lib/slurm-budget/budget.sqlite --socket /run/slurm-budget/budgetd.sock \
        --listen 0.0.0.0:8700 --config /etc/slurm-budget/budgetd.toml
    ;;
ctl)
    node_lines="" gres_lines=""
    for ((i = 1; i <= NODES; i++)); do
        node_lines+="NodeName=gpu$i NodeAddr=gpu$i CPUs=16 RealMemory=64000 Gres=gpu:$GPU_TYPE:$GPUS State=UNKNOWN"$'\n'
        gres_lines+="NodeName=gpu$i Name=gpu Type=$GPU_TYPE File=/dev/fakegpu/nvidia[0-$((GPUS - 1))]"$'\n'
    done
    case "${TB_LINK:-tcp}" in
        tcp)
            install -m 0600 /dev/null /shared/etc/budget.token
            printf '%s\n' "$TB_ADMIN_TOKEN" >/shared/etc/budget.token
            endpoint="budget_socket=http://budgetd:8700,budget_token_file=/shared/etc/budget.token" ;;
        socket) endpoint="budget_socket=/run/slurm-budget/budgetd.sock" ;;
        *) sb_die "TB_LINK must be tcp or socket" ;;
    esac
    # budget_max_age=10: safe mode 10 s after budgetd becomes unreachable (the smoke test
    # cuts the network); a site keeps the policy's 60 s.
    render /opt/slurm-budget/slurm-conf/slurm.conf.in "$SLURM_CONF.tmp" \
        CLUSTER=sbdocker HOST=ctl CTLD_ADDR=ctl CTLD_PORT=6817 \
        "PLUGIN_DIR=$SB_SYSTEM_PLUGIN_DIR" PRIORITY_TYPE=priority/budget \
        "PRIORITY_PARAMS_LINE=PriorityParameters=$endpoint,budget_period=2,budget_timeout_ms=1000,budget_max_age=10" \
        "EXTRA_CONF=JobSubmitPlugins=budget"$'\n'"PreemptType=preempt/budget"$'\n'"PreemptMode=REQUEUE" \
        MAX_JOB_COUNT=20000 MIN_JOB_AGE=300 STATE_DIR=/var/spool/slurm/ctld SPOOL_DIR=/var/spool/slurm \
        RUN_DIR=/run/slurm LOG_DIR=/var/log/slurm CTLD_DEBUG=info \
        "NODE_LINES=${node_lines%$'\n'}" "NODE_RANGE=gpu[1-$NODES]"
    render /opt/slurm-budget/slurm-conf/gres.conf.in /shared/etc/gres.conf "GRES_LINES=${gres_lines%$'\n'}"
    mv "$SLURM_CONF.tmp" "$SLURM_CONF"
    # Started by its own name: Debian's /usr/sbin/slurmctld is an alternatives link.
    exec /usr/sbin/slurmctld -D -f "$SLURM_CONF"
    ;;
node)
    name="${2:?node NAME}"
    mkdir -p /dev/fakegpu "/var/spool/slurm/$name"
    for ((g = 0; g < GPUS; g++)); do
        [[ -c /dev/fakegpu/nvidia$g ]] || mknod /dev/fakegpu/nvidia$g c 1 3
    done
    wait_for '[[ -f $SLURM_CONF ]]'
    # No NVML here: the agent reports the node without GPUs, over TCP with the agent token.
    budget-agent --node "$name" --socket http://budgetd:8700 --token "$TB_AGENT_TOKEN" \
        --no-gpu-mode --interval 10 >/var/log/slurm/budget-agent.log 2>&1 &
    exec /usr/sbin/slurmd -D -N "$name" -f "$SLURM_CONF"
    ;;
shell)
    exec bash
    ;;
*)
    exec "$@"
    ;;
esac

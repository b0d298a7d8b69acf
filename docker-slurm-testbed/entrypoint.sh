#!/usr/bin/env bash
# Entry point of the Docker testbed image. Roles:
#   budgetd       the budget service, socket on the shared volume
#   ctl           renders slurm.conf/gres.conf from slurm-conf/*.in into /shared/etc,
#                 then runs slurmctld with priority/budget, preempt/budget, job_submit/budget
#   node NAME     makes 8 fake GPUs (character devices) and runs slurmd -N NAME
# Anything else is run as a command with SLURM_CONF and BUDGET_SOCKET set.
set -euo pipefail
SB_PROG=docker
source /opt/slurm-budget/scripts/lib/common.sh
NODES="${NODES:-4}" GPUS="${GPUS:-8}" GPU_TYPE="${GPU_TYPE:-h100}"
export SLURM_CONF=/shared/etc/slurm.conf BUDGET_SOCKET=/shared/budgetd.sock
PATH="/opt/slurm-budget/target/release:$PATH"
mkdir -p /shared/etc /var/spool/slurm /var/log/slurm /run/slurm /opt/plugins

wait_for() { local i; for ((i = 0; i < 600; i++)); do [[ -e "$1" ]] && return 0; sleep 0.2; done; sb_die "$1 never appeared"; }

case "${1:-}" in
budgetd)
    rm -f "$BUDGET_SOCKET"
    exec budgetd --db /shared/budget.sqlite --socket "$BUDGET_SOCKET"
    ;;
ctl)
    node_lines="" gres_lines=""
    for ((i = 1; i <= NODES; i++)); do
        node_lines+="NodeName=gpu$i NodeAddr=gpu$i CPUs=16 RealMemory=64000 Gres=gpu:$GPU_TYPE:$GPUS State=UNKNOWN"$'\n'
        gres_lines+="NodeName=gpu$i Name=gpu Type=$GPU_TYPE File=/dev/fakegpu/nvidia[0-$((GPUS - 1))]"$'\n'
    done
    for spec in "${SB_PLUGINS[@]}"; do
        install -m 0755 "/opt/slurm-budget/target/release/lib${spec%%:*}.so" "/opt/plugins/${spec#*:}"
    done
    render /opt/slurm-budget/slurm-conf/slurm.conf.in "$SLURM_CONF.tmp" \
        CLUSTER=sbdocker HOST=ctl CTLD_ADDR=ctl CTLD_PORT=6817 \
        "PLUGIN_DIR=/opt/plugins:$SB_SYSTEM_PLUGIN_DIR" PRIORITY_TYPE=priority/budget \
        "PRIORITY_PARAMS_LINE=PriorityParameters=budget_socket=$BUDGET_SOCKET,budget_period=5,budget_timeout_ms=1000" \
        "EXTRA_CONF=JobSubmitPlugins=budget"$'\n'"PreemptType=preempt/budget"$'\n'"PreemptMode=REQUEUE" \
        MAX_JOB_COUNT=20000 STATE_DIR=/var/spool/slurm/ctld SPOOL_DIR=/var/spool/slurm \
        RUN_DIR=/run/slurm LOG_DIR=/var/log/slurm CTLD_DEBUG=info \
        "NODE_LINES=${node_lines%$'\n'}" "NODE_RANGE=gpu[1-$NODES]"
    render /opt/slurm-budget/slurm-conf/gres.conf.in /shared/etc/gres.conf "GRES_LINES=${gres_lines%$'\n'}"
    mv "$SLURM_CONF.tmp" "$SLURM_CONF"
    wait_for "$BUDGET_SOCKET"
    # Started by its own name: Debian's /usr/sbin/slurmctld is what Slurm expects in argv[0].
    exec slurmctld -D -f "$SLURM_CONF"
    ;;
node)
    name="${2:?node NAME}"
    mkdir -p /dev/fakegpu "/var/spool/slurm/$name"
    for ((g = 0; g < GPUS; g++)); do
        [[ -c /dev/fakegpu/nvidia$g ]] || mknod /dev/fakegpu/nvidia$g c 1 3
    done
    wait_for "$SLURM_CONF"
    exec slurmd -D -N "$name" -f "$SLURM_CONF"
    ;;
*)
    exec "$@"
    ;;
esac

# Sourced by scripts/cluster-check.sh and scripts/upgrade-check.sh: a scratch CLUSTER_DIR for scripts/cluster.sh,
# brought down and removed at exit (kept when CLUSTER_SCRATCH_KEEP=1), each node's last warnings shown on a failure.
# Needs log() from the sourcing script; argument: the scratch directory's name prefix.
export CLUSTER_DIR
CLUSTER_DIR=$(mktemp -d -t "$1.XXXXXX")
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    bash scripts/cluster.sh down || true
    if [[ $status -ne 0 ]]; then
        for f in "$CLUSTER_DIR"/node*.log; do
            log "last warnings of $(basename "$f"):"
            grep -E 'level=(warn|error)' "$f" | tail -n 5 >&2 || true
        done
    fi
    if [[ ${CLUSTER_SCRATCH_KEEP:-0} == 1 ]]; then log "kept $CLUSTER_DIR"; else rm -rf "$CLUSTER_DIR"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"

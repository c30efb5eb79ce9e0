#!/usr/bin/env bash
# A job killed mid-way with SIGKILL resumes to the same result (docs/jobs.md#guarantees; run by CI): one node of
# scripts/cluster.sh on a fresh database, a `remove_messages` job over 30,000 imported messages, the node killed while
# the job runs and started again, then scripts/jobs_kill_check.py checks the job's result and every history. Bounded:
# about a minute and a half (the dead node's lease runs out after 30 s), 6 at most.
#
# usage: scripts/jobs-kill-check.sh        Environment: JOBS_KILL_SKIP_BUILD=1, JOBS_KILL_KEEP=1 (keep the directory).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
log() { printf '[jobs-kill-check] %s\n' "$*" >&2; }

if [[ ${JOBS_KILL_SKIP_BUILD:-0} != 1 ]]; then
    log "building parley (release)"
    swift build -c release --product parley >/tmp/parley-jobs-kill-build.log 2>&1 \
        || { tail -n 40 /tmp/parley-jobs-kill-build.log >&2; exit 1; }
fi
export CLUSTER_DIR
CLUSTER_DIR=$(mktemp -d -t parley-jobs-kill.XXXXXX)
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    bash scripts/cluster.sh down || true
    if [[ $status -ne 0 ]]; then
        log "last warnings of the node:"
        grep -hE 'level=(warn|error)' "$CLUSTER_DIR"/node*.log | tail -n 10 >&2 || true
    fi
    [[ ${JOBS_KILL_KEEP:-0} == 1 ]] && log "kept $CLUSTER_DIR" || rm -rf "$CLUSTER_DIR"
    exit "$status"
}
trap cleanup EXIT INT TERM
bash scripts/cluster.sh up 1
timeout 360 python3 scripts/jobs_kill_check.py "$CLUSTER_DIR"

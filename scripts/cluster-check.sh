#!/usr/bin/env bash
# The cluster check (issue 24; run by CI; figures in docs/scaling.md): three nodes over one PostgreSQL behind nginx
# (scripts/cluster.sh), all started at the same moment on an empty database, then scripts/cluster_check.py through
# nginx:
#   - 200 user streams (one per user, presence on) spread over the nodes by nginx, and 16 senders (peer texts over 150
#     pairs, 1 in 20 a group text to 100 members), each send retried with its client_msg_id and Idempotency-Key until
#     acknowledged;
#   - 20 friend applications and 20 group join applications, one per group (expiring after 60 s, the smallest expiry) and 20 calls
#     (timing out after 25 s), and a webhook on their events whose receiver refuses every first attempt;
#   - 60 scheduled messages due one every 300 ms from 12 s after they were scheduled (across the kill and the restart);
#   - 12 s into the load node 2 is killed with SIGKILL and started again 5 s later; 10 probe users hold streams
#     straight to node 2 (5 of them also one on node 3, as ios).
# Checks: each file of Migrations/ applied by exactly one node; every stream reconnected through nginx with
# Last-Event-ID and received exactly its user's events from where it started (the user event log read afterwards),
# none twice, none missing, in id order; every acknowledged send is in its conversation's history once and reached
# each recipient's stream; each scheduled message sent once and never before its send_at; each timer fired once (one expiry event per application, one call.ended per call) and its
# webhook took exactly two attempts; the probes alone on node 2 went offline once its heartbeat expired, the others
# stayed online on ios, and no reconnected user reads offline. Bounded: about 2 minutes, 5 at most.
# Then the rolling restart (issue 40; `cluster_check.py DIR rolling`, about 40 s): 60 more user streams, 6 senders and 3
# readers through nginx while node 1, 2 and 3 are restarted in turn with SIGTERM (scripts/cluster.sh restart; each
# ready again before the next). Checks: not one failed request (every answer other than 2xx, every connection error
# counts; no client retry), every stream ended by its draining node and resumed through nginx with Last-Event-ID to
# exactly its user's log, every acknowledged send stored once and streamed, and no user reads offline at any moment.
#
# usage: scripts/cluster-check.sh        Environment: CLUSTER_SKIP_BUILD=1, CLUSTER_KEEP=1 (keep the directory and
#                                       its logs), CLUSTER_SEED, and the CLUSTER_* settings of scripts/cluster_check.py.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
log() { printf '[cluster-check] %s\n' "$*" >&2; }

if [[ ${CLUSTER_SKIP_BUILD:-0} != 1 ]]; then
    log "building parley (release)"
    swift build -c release --product parley >/tmp/parley-cluster-build.log 2>&1 \
        || { tail -n 40 /tmp/parley-cluster-build.log >&2; exit 1; }
fi
CLUSTER_SCRATCH_KEEP=${CLUSTER_KEEP:-0}
# shellcheck source=scripts/cluster-scratch.sh
source scripts/cluster-scratch.sh parley-cluster

CLUSTER_LOG_LEVEL=info bash scripts/cluster.sh up 3

# Migrations: the three nodes raced for the advisory lock; every file must have been applied once, by one of them.
expected=$(ls Migrations/*.sql Migrations/functions/*.sql | wc -l)
applied=$(grep -h 'migrations: applied' "$CLUSTER_DIR"/node*.log | sed 's/.*migrations: applied \([^"]*\)".*/\1/' | sort)
distinct=$(sort -u <<<"$applied" | grep -c . || true)
total=$(grep -c . <<<"$applied" || true)
by_nodes=$(grep -c 'migrations: applied' "$CLUSTER_DIR"/node*.log | tr '\n' ' ')
log "migrations: $total applications of $distinct files (the repository has $expected); per node log: $by_nodes"
if [[ $total -ne $expected || $distinct -ne $expected ]]; then
    log "FAILED: each migration file must be applied exactly once across the nodes"
    exit 1
fi

timeout 300 python3 scripts/cluster_check.py "$CLUSTER_DIR"

timeout 180 python3 scripts/cluster_check.py "$CLUSTER_DIR" rolling
# The drain of each node, phase by phase (docs/operations.md#shutdown).
grep -h 'shutdown phase done\|msg=stopped ms=' "$CLUSTER_DIR"/node*.log | sed 's/^/[cluster-check] /' >&2 || true

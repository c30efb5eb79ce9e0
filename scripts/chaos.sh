#!/usr/bin/env bash
# Chaos run (issue 16; the figures go in docs/reliability.md, "Chaos run"). Not run by CI: it takes minutes and kills
# processes on purpose.
#
# What it does, on loopback only (127.0.0.1, a free port), with processes it starts itself and stops by PID:
#   1. builds the release server (`swift build -c release --product parley`, unless CHAOS_SKIP_BUILD=1) and starts
#      `parley serve` on a fresh data directory (embedded PostgreSQL), one app, 20 users;
#   2. drives peer text sends from CHAOS_SENDERS sender threads (bench/send.sh's load, in Python): each send has its
#      own client_msg_id and the same value as Idempotency-Key, and a send that gets no answer, a connection error or a
#      5xx is retried with both unchanged until it is acknowledged (201, or 200 `Parley-Duplicate`);
#   3. meanwhile, at random moments (0.5–CHAOS_MAX_GAP_S seconds apart, each after the server was ready again), kills
#      the server with SIGKILL CHAOS_SERVER_KILLS times (then starts it again at once on the same data directory)
#      and the embedded postmaster with SIGKILL CHAOS_PG_KILLS times (Parley's supervisor restarts it), in random
#      order;
#   4. stops the load (bounded: CHAOS_MAX_SECONDS overall, CHAOS_MESSAGES acknowledged sends at most), then reads every
#      conversation's history and checks: every acknowledged message is there (lost = 0), no client_msg_id appears
#      twice (duplicates = 0), and each conversation's seqs run 1..n with no gap;
#   5. prints the figures: kills, acknowledged, found, lost, duplicates, retries, time from each kill to the server
#      answering /readyz 200 again (p50 / max) for both kinds of kill. Exit status 1 when a check fails.
#
# usage: scripts/chaos.sh
# Environment: CHAOS_SKIP_BUILD=1, CHAOS_SCRATCH_PATH (default .build; the binary is <path>/release/parley),
#              CHAOS_SERVER_KILLS=20, CHAOS_PG_KILLS=5, CHAOS_SENDERS=8, CHAOS_MESSAGES=200000, CHAOS_MAX_SECONDS=900,
#              CHAOS_MAX_GAP_S=3, CHAOS_SEED (random order and moments; printed), CHAOS_KEEP=1 keeps the temporary
#              directory (server logs, pg.log) for a look afterwards.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SCRATCH=${CHAOS_SCRATCH_PATH:-$ROOT/.build}

log() { printf '[chaos] %s\n' "$*" >&2; }

command -v python3 >/dev/null || { log "python3 is required"; exit 1; }
if [[ ${CHAOS_SKIP_BUILD:-0} != 1 ]]; then
    log "building parley (release)"
    swift build -c release --product parley --scratch-path "$SCRATCH" >/tmp/parley-chaos-build.log 2>&1 \
        || { tail -n 40 /tmp/parley-chaos-build.log >&2; exit 1; }
fi
BINARY=$SCRATCH/release/parley
[[ -x $BINARY ]] || { log "no $BINARY: build it or unset CHAOS_SKIP_BUILD"; exit 1; }

TMP=$(mktemp -d -t parley-chaos.XXXXXX)
chmod 755 "$TMP"  # parley running as root hands its data directory to the unprivileged PostgreSQL user
# chaos.py writes the pid of the server it runs here; whatever happens to it, the server is stopped on exit.
cleanup() {
    local status=$? pid
    trap - EXIT INT TERM
    if [[ -f $TMP/server.pid ]]; then
        pid=$(cat "$TMP/server.pid")
        if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    if [[ ${CHAOS_KEEP:-0} == 1 ]]; then log "kept $TMP"; else rm -rf "$TMP"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

python3 "$ROOT/scripts/chaos.py" "$BINARY" "$TMP"

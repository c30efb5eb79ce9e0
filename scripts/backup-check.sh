#!/usr/bin/env bash
# A backup taken under send load restores to a consistent snapshot (docs/backup.md; run by CI): the release server on
# a fresh data directory (as root, under a 0700 directory, so its cluster is relocated), populated, `parley backup`
# while messages are sent, `parley restore` into a fresh data directory, a server started there and every event,
# user, group and group message compared with the source (scripts/backup_check.py says how). Also the refusals and
# `parley data list/remove`. About a minute; bounded by `timeout 300`.
#
# usage: scripts/backup-check.sh     Environment: BACKUP_SKIP_BUILD=1 (use .build/release/parley as it is),
#                                    BACKUP_KEEP=1 (keep the work directory and its logs).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
log() { printf '[backup-check] %s\n' "$*" >&2; }

if [[ ${BACKUP_SKIP_BUILD:-0} != 1 ]]; then
    log "building parley (release)"
    swift build -c release --product parley >/tmp/parley-backup-check-build.log 2>&1 \
        || { tail -n 40 /tmp/parley-backup-check-build.log >&2; exit 1; }
fi
WORK=$(mktemp -d -t parley-backup-check.XXXXXX)
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    # The source's relocated cluster, when the check stopped before `parley data remove` took it.
    for link in "$WORK/home/parley-data/pg" "$WORK/restored-data/pg"; do
        if target=$(readlink "$link" 2>/dev/null); then rm -rf "${target%/pg}"; fi
    done
    if [[ $status -ne 0 ]]; then
        for f in "$WORK"/*.log; do [[ -f $f ]] && { log "last lines of $f:"; tail -n 15 "$f" >&2; }; done
    fi
    [[ ${BACKUP_KEEP:-0} == 1 ]] && log "kept $WORK" || rm -rf "$WORK"
    exit "$status"
}
trap cleanup EXIT INT TERM
started=$(date +%s)
timeout 300 python3 scripts/backup_check.py "$ROOT/.build/release/parley" "$WORK"
log "done in $(( $(date +%s) - started )) s"

#!/usr/bin/env bash
# The upgrade check (issue 40; run by CI after scripts/cluster-check.sh; the rule it checks: docs/operations.md#upgrades).
# A database written by the previous release, migrated by this one while the previous release's nodes still serve,
# then those nodes replaced one by one by nodes of this release:
#   - the previous release is the commit before this issue's first migration (UPGRADE_PREVIOUS, default 5aa6b30^,
#     the parent of the commit that added Migrations/0038); its tree is taken with `git archive` and built
#     (`swift build -c release --product parley`) once into UPGRADE_CACHE (default /tmp/parley-previous-<commit>);
#   - scripts/cluster.sh starts PostgreSQL, two nodes of that binary and nginx; `cluster_check.py DIR upgrade` then
#     puts 60 user streams, 6 senders and 3 readers through nginx, runs this release's `parley migrate` while the old
#     nodes serve, keeps sending through them into the migrated schema, and restarts each node with SIGTERM as a node
#     of this release (scripts/cluster.sh restart).
# Checks: the new binary applied the migrations the old database lacked; not one failed request through the whole
# upgrade (every answer other than 2xx and every connection error counts, no client retry); every send acknowledged by
# an old node, before and after the migration, and by a new one, is in its conversation's history once when read
# through the new nodes; every stream matches its user's event log exactly. About 40 s, plus the old build (a cold
# release build: several minutes; cached afterwards).
#
# usage: scripts/upgrade-check.sh      Environment: UPGRADE_SKIP_BUILD=1 (this release's binary is built),
#                                      UPGRADE_NEW_BINARY (default .build/release/parley), UPGRADE_PREVIOUS, UPGRADE_CACHE,
#                                      UPGRADE_KEEP=1 (keep the cluster directory).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
log() { printf '[upgrade-check] %s\n' "$*" >&2; }

NEW_BINARY=${UPGRADE_NEW_BINARY:-$ROOT/.build/release/parley}
if [[ ${UPGRADE_SKIP_BUILD:-0} != 1 ]]; then
    log "building this release (release)"
    swift build -c release --product parley >/tmp/parley-upgrade-build.log 2>&1 \
        || { tail -n 40 /tmp/parley-upgrade-build.log >&2; exit 1; }
fi
previous=$(git rev-parse --verify "${UPGRADE_PREVIOUS:-5aa6b30^}^{commit}")
CACHE=${UPGRADE_CACHE:-/tmp/parley-previous-${previous:0:12}}
# Built inside its own tree: the old binary finds its own Migrations/ by walking up to its Package.swift
# (an old node must never apply this release's migrations at its start).
OLD_BINARY=$CACHE/src/.build/release/parley
if [[ ! -x $OLD_BINARY ]]; then
    log "building the previous release ${previous:0:12} into $CACHE (a cold release build)"
    rm -rf "$CACHE/src"
    mkdir -p "$CACHE/src"
    git archive "$previous" | tar -x -C "$CACHE/src"
    began=$SECONDS
    (cd "$CACHE/src" && swift build -c release --product parley) >"$CACHE/build.log" 2>&1 \
        || { tail -n 40 "$CACHE/build.log" >&2; exit 1; }
    log "previous release built in $((SECONDS - began)) s"
fi
[[ -d $CACHE/src/Migrations ]] || { log "no Migrations in $CACHE/src"; exit 1; }

CLUSTER_SCRATCH_KEEP=${UPGRADE_KEEP:-0}
# shellcheck source=scripts/cluster-scratch.sh
source scripts/cluster-scratch.sh parley-upgrade

CLUSTER_BINARY=$OLD_BINARY CLUSTER_LOG_LEVEL=info bash scripts/cluster.sh up 2
old_versions=$(ls "$CACHE/src/Migrations"/[0-9]*.sql | wc -l)
new_versions=$(ls Migrations/[0-9]*.sql | wc -l)
log "two nodes of ${previous:0:12} up ($old_versions migrations; this release has $new_versions)"
timeout 240 python3 scripts/cluster_check.py "$CLUSTER_DIR" upgrade "$NEW_BINARY"

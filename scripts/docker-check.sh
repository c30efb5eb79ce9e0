#!/usr/bin/env bash
# docker/Dockerfile and deploy/parley.service checked on a machine without a container engine or systemd running.
#
# The image (scripts/docker_check.py): what each build-stage COPY copies goes into a scratch tree, the stage's
# `swift build` runs there, the runtime stage's files are laid out under a scratch root in /tmp and started as the
# image's user with its ENV; /readyz, /console, /openapi.json and the HEALTHCHECK command must answer. The scratch
# tree (.build/docker-check, DOCKER_CHECK_CACHE) is kept between runs: the first run is a full release build (about
# 10 minutes on 2 cores), later ones rebuild what changed (under a minute when only a few files did).
#
# The systemd unit: `systemd-analyze verify` on a copy whose ExecStart names an executable that exists here.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "docker-check: run as root (it starts the image's layout as the image's user)"; exit 1; }
cache=${DOCKER_CHECK_CACHE:-$PWD/.build/docker-check}
mkdir -p "$cache"

python3 scripts/docker_check.py "$PWD" "$cache"

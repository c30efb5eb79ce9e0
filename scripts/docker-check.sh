#!/usr/bin/env bash
# The deployment files of docs/deployment.md, checked on a machine without a container engine or a running systemd.
#
# 1. docker/Dockerfile (scripts/docker_check.py): the files each build-stage COPY copies (hard links) go into a
#    scratch tree, the stage's `swift build` runs there, mounted at the repository's path in a private mount
#    namespace; the runtime stage's files are laid out under a scratch root in /tmp and started as the image's user
#    with its ENV, the repository hidden; /readyz, /console, /openapi.json and the HEALTHCHECK command must answer.
#    The scratch tree's .build (DOCKER_CHECK_CACHE, default .build/docker-check) is kept between runs: the first run,
#    and a run after a change to a low module, is a full release build with a static Swift runtime (6.3 minutes on 2
#    busy cores); a run with the sources unchanged builds nothing. Needs root (unshare, mount, setpriv); creates the
#    image's user here (parley, uid 10001) when missing, since initdb needs its user to have a name.
# 2. docker/compose.yml: PostgreSQL's healthcheck, Parley waiting for it, restart policies, volumes.
# 3. deploy/parley.service: `systemd-analyze verify` (any warning fails) on a copy whose ExecStart names the binary
#    just built, since verify needs the executable to exist and /opt/parley is not installed here.
# 4. deploy/nginx.conf: `nginx -t`, with a throw-away certificate and loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "docker-check: run as root (it starts the image's layout as the image's user)"; exit 1; }
cache=${DOCKER_CHECK_CACHE:-$PWD/.build/docker-check}
mkdir -p "$cache"
scratch=$(mktemp -d /tmp/parley-docker-check-XXXXXX)
trap 'rm -rf "$scratch"' EXIT

python3 scripts/docker_check.py "$PWD" "$cache"

python3 - <<'PY'
import yaml
services = yaml.safe_load(open("docker/compose.yml"))["services"]
postgres, parley = services["postgres"], services["parley"]
assert "pg_isready" in " ".join(postgres["healthcheck"]["test"]), "compose: postgres has no pg_isready healthcheck"
assert parley["depends_on"]["postgres"]["condition"] == "service_healthy", "compose: parley does not wait for a healthy postgres"
assert "/readyz" in " ".join(parley["healthcheck"]["test"]), "compose: parley has no /readyz healthcheck"
for name, service in services.items():
    assert service.get("restart") == "unless-stopped", f"compose: {name} has no restart policy"
    assert service.get("volumes"), f"compose: {name} keeps its data in no volume"
print("docker-check: compose.yml: healthchecks, depends_on service_healthy, restart policies, volumes")
PY

binary="$cache/src/.build/release/parley"
sed "s#^ExecStart=/opt/parley/parley#ExecStart=$binary#" deploy/parley.service >"$scratch/parley.service"
grep -q "^ExecStart=$binary " "$scratch/parley.service" || { echo "docker-check: deploy/parley.service: no ExecStart=/opt/parley/parley"; exit 1; }
if ! verified=$(systemd-analyze verify "$scratch/parley.service" 2>&1) || [ -n "$verified" ]; then
  echo "$verified"; echo "docker-check: FAILED: systemd-analyze verify deploy/parley.service"; exit 1
fi
echo "docker-check: deploy/parley.service: systemd-analyze verify clean (ExecStart pointed at $binary)"

# deploy/nginx.conf inside a minimal main configuration, its ports and certificate replaced.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=chat.example.com \
  -keyout "$scratch/key.pem" -out "$scratch/cert.pem" >/dev/null 2>&1
python3 - "$scratch" <<'PY'
import sys
scratch = sys.argv[1]
block = open("deploy/nginx.conf").read()
for old, new in [
    ("/etc/letsencrypt/live/chat.example.com/fullchain.pem", f"{scratch}/cert.pem"),
    ("/etc/letsencrypt/live/chat.example.com/privkey.pem", f"{scratch}/key.pem"),
    ("listen 80;", "listen 127.0.0.1:1;"),
    ("listen 443 ssl", "listen 127.0.0.1:2 ssl"),
]:
    assert old in block, f"deploy/nginx.conf has no {old!r}"
    block = block.replace(old, new)
temp = " ".join(f"{kind}_temp_path {scratch}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
with open(f"{scratch}/nginx.conf", "w") as handle:
    handle.write(f"pid {scratch}/nginx.pid;\nerror_log {scratch}/error.log;\nevents {{}}\nhttp {{\n{temp}\n{block}}}\n")
PY
nginx -t -q -c "$scratch/nginx.conf" || { echo "docker-check: FAILED: nginx -t rejects deploy/nginx.conf"; exit 1; }
echo "docker-check: deploy/nginx.conf passes nginx -t"
echo "docker-check: all passed"

# Sourced by scripts that check a running server (readme-smoke.sh, console-check.sh): `serve_fresh BIN NAME [VAR=value
# ...]` starts BIN on a fresh data directory and a free loopback port, with the given environment, stops it (by its
# pid) and removes the directory on exit, and returns once /readyz answers; it sets `data`, `port`, `log` and `pid`.
serve_fresh() {
  local bin=$1 name=$2
  shift 2
  data=$(mktemp -d "/tmp/parley-$name-XXXXXX")
  chmod 755 "$data"  # running as root, the embedded cluster runs as postgres and must enter it
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
  log="$data.log"
  env "$@" "$bin" serve --data-dir "$data" --listen "127.0.0.1:$port" >"$log" 2>&1 &
  pid=$!
  trap 'kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$data" "$log"' EXIT
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "server exited"; exit 1; }
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { cat "$log"; echo "server not ready"; exit 1; }
}

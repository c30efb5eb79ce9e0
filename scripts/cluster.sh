#!/usr/bin/env bash
# Several Parley nodes behind nginx, on this machine (issue 24; docs/scaling.md). Loopback only; every process is
# started here and stopped by its PID.
#
#   scripts/cluster.sh up [NODES]    one PostgreSQL cluster (initdb'd on the first `up`, Unix socket only), NODES (3)
#                                    `parley serve` processes started at the same moment on free loopback ports with the
#                                    same DATABASE_URL and admin key, and nginx in front (round robin, SSE-friendly);
#                                    creates the app `cluster` on the first `up` and writes everything to cluster.env
#   scripts/cluster.sh down          stops nginx, the nodes and PostgreSQL (by PID); the directory stays (rm it to start
#                                    from an empty database)
#   scripts/cluster.sh status        each process, its PID and whether it answers
#   scripts/cluster.sh kill N        SIGKILL node N (1-based), as a crash would
#   scripts/cluster.sh start N       starts node N again on its port (waits for /readyz)
#   scripts/cluster.sh restart N     SIGTERM to node N (its graceful drain; docs/operations.md#shutdown), waits for it to
#                                    exit (fails if it needs more than 20 s), starts it again and waits for /readyz: one
#                                    step of a rolling restart
#
# Environment: CLUSTER_DIR (default /tmp/parley-cluster), CLUSTER_BINARY (default .build/release/parley; build it with
# `swift build -c release --product parley`), CLUSTER_LOG_LEVEL (info), CLUSTER_POOL_SIZE (the nodes' pool, their
# default when unset), CLUSTER_PG_OPTIONS (more `-c name=value` settings of PostgreSQL), CLUSTER_SEND_AFFINITY=1
# (nginx sends `POST /v1/messages` of one Authorization, i.e. one app key, to one node; the rest round robin),
# NGINX (path of nginx; installed with apt-get when missing and running as root).
#
# After `up`: `source $CLUSTER_DIR/cluster.env` sets CLUSTER_URL (nginx), PARLEY_KEY (the app key), NODE_PORTS,
# DATABASE_URL, PARLEY_ADMIN_KEY. Logs: $CLUSTER_DIR/node<N>.log, pg.log, nginx-error.log.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${CLUSTER_DIR:-/tmp/parley-cluster}
BINARY=${CLUSTER_BINARY:-$ROOT/.build/release/parley}
LOG_LEVEL=${CLUSTER_LOG_LEVEL:-info}
ENV_FILE=$DIR/cluster.env

say() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }
pid_of() { [[ -f $DIR/$1.pid ]] && cat "$DIR/$1.pid" || true; }

stop_pid() {  # name signal: stops the process recorded in <name>.pid and waits up to 20 s for it to end
    local name=$1 signal=${2:-TERM} pid
    pid=$(pid_of "$name")
    if alive "$pid"; then
        kill "-$signal" "$pid" 2>/dev/null || true
        for _ in $(seq 200); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && { say "$name ($pid) still runs after SIGTERM; SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
    fi
    rm -f "$DIR/$name.pid"
}

# --- PostgreSQL: one cluster of our own, as an unprivileged user, listening on a Unix socket only ------------------

PG_BIN=$(pg_config --bindir 2>/dev/null || true)
[[ -x $PG_BIN/initdb ]] || PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)

as_pg() {  # runs a PostgreSQL binary as the postgres user when we are root (PostgreSQL refuses to run as root)
    if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_postgres() {
    [[ -x $PG_BIN/postgres ]] || die "no PostgreSQL server binaries (apt-get install postgresql)"
    mkdir -p "$DIR/run"
    [[ $(id -u) -eq 0 ]] && chown postgres "$DIR/run"
    if [[ ! -f $DIR/pg/PG_VERSION ]]; then
        mkdir -p "$DIR/pg"
        [[ $(id -u) -eq 0 ]] && chown postgres "$DIR/pg"
        chmod 700 "$DIR/pg"
        as_pg "$PG_BIN/initdb" -D "$DIR/pg" -U parley --auth=trust -E UTF8 --no-instructions >"$DIR/initdb.log" 2>&1 \
            || { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
    fi
    # Three nodes hold about 3 × (pool + 6 dedicated) connections; the check's readers add a few.
    as_pg "$PG_BIN/postgres" -D "$DIR/pg" -k "$DIR/run" -c listen_addresses= -c max_connections=200 \
        -c shared_buffers=256MB -c synchronous_commit=on ${CLUSTER_PG_OPTIONS:-} >>"$DIR/pg.log" 2>&1 &
    for _ in $(seq 300); do
        [[ -S $DIR/run/.s.PGSQL.5432 ]] && [[ -f $DIR/pg/postmaster.pid ]] && break
        sleep 0.1
    done
    head -n 1 "$DIR/pg/postmaster.pid" >"$DIR/postgres.pid" 2>/dev/null || die "PostgreSQL did not start (see $DIR/pg.log)"
    for _ in $(seq 100); do
        "$PG_BIN/pg_isready" -q -h "$DIR/run" -p 5432 -U parley -d postgres && return 0
        sleep 0.1
    done
    die "PostgreSQL does not answer (see $DIR/pg.log)"
}

# --- the nodes ---------------------------------------------------------------------------------------------------

start_node() {  # n: starts node n in the background (its port from cluster.env); does not wait
    local n=$1 port
    port=$(node_port "$n")
    mkdir -p "$DIR/node$n"
    # Same database and admin key on every node (cursors are signed with a key derived from it; docs/operations.md).
    env PARLEY_LOG_LEVEL="$LOG_LEVEL" PARLEY_ADMIN_KEY="$PARLEY_ADMIN_KEY" DATABASE_URL="$DATABASE_URL" \
        PARLEY_WEBHOOK_ALLOW_PRIVATE=1 ${CLUSTER_POOL_SIZE:+PARLEY_DB_POOL_SIZE=$CLUSTER_POOL_SIZE} \
        "$BINARY" serve --listen "127.0.0.1:$port" --data-dir "$DIR/node$n" >>"$DIR/node$n.log" 2>&1 &
    echo $! >"$DIR/node$n.pid"
}

wait_node() {  # n: until node n answers /readyz 200 (60 s)
    local n=$1 port pid
    port=$(node_port "$n")
    pid=$(pid_of "node$n")
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && return 0
        alive "$pid" || { tail -n 20 "$DIR/node$n.log" >&2; die "node $n exited during start-up"; }
        sleep 0.1
    done
    die "node $n is not ready after 60 s (see $DIR/node$n.log)"
}

node_port() { local ports; read -r -a ports <<<"$NODE_PORTS"; echo "${ports[$(($1 - 1))]}"; }

# --- nginx -------------------------------------------------------------------------------------------------------

find_nginx() {
    NGINX=${NGINX:-$(command -v nginx || true)}
    [[ -z $NGINX && -x /usr/sbin/nginx ]] && NGINX=/usr/sbin/nginx
    if [[ -z $NGINX ]]; then
        [[ $(id -u) -eq 0 ]] || die "nginx is missing (apt-get install nginx-light)"
        say "installing nginx-light"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null 2>&1 \
            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null; }
        NGINX=$(command -v nginx || echo /usr/sbin/nginx)
    fi
}

write_nginx_conf() {
    local upstreams="" port sends_upstream="" sends_location=""
    for port in $NODE_PORTS; do upstreams+="        server 127.0.0.1:$port max_fails=1 fail_timeout=2s;"$'\n'; done
    if [[ ${CLUSTER_SEND_AFFINITY:-0} == 1 ]]; then
        # Sends of one key (one app) go to one node, whose writers then batch all of them (docs/scaling.md); the
        # hash moves them to another node only while that one fails.
        sends_upstream="    upstream parley_sends {
        hash \$http_authorization consistent;
$upstreams        keepalive 64;
    }"
        sends_location="        location = /v1/messages { proxy_pass http://parley_sends; }"
    fi
    mkdir -p "$DIR/nginx"
    cat >"$DIR/nginx.conf" <<EOF
# Written by scripts/cluster.sh: round robin over the nodes, shaped for long-lived event streams.
$([[ $(id -u) -eq 0 ]] && echo "user root;")
worker_processes 1;
daemon off;
pid $DIR/nginx/nginx.pid;
error_log $DIR/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $DIR/nginx/client_body;
    proxy_temp_path $DIR/nginx/proxy;
    fastcgi_temp_path $DIR/nginx/fastcgi;
    uwsgi_temp_path $DIR/nginx/uwsgi;
    scgi_temp_path $DIR/nginx/scgi;
    upstream parley {
$upstreams        keepalive 64;
    }
$sends_upstream
    server {
        listen 127.0.0.1:$LB_PORT;
        client_max_body_size 64m;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host \$host;
        proxy_set_header X-Forwarded-For \$remote_addr;
        # Server-sent events: no buffering, so each frame leaves at once; streams stay open for an hour of silence
        # at most (Parley pings every 15 s); request headers, Last-Event-ID among them, pass unchanged.
        proxy_buffering off;
        proxy_cache off;
        proxy_read_timeout 1h;
        proxy_send_timeout 1h;
        # A node that refuses the connection (stopped, crashed, draining) or answers 503 (draining) is skipped: the
        # request goes to the next one. POSTs too (non_idempotent): a POST is resent only when the first node failed
        # before answering, and the clients here send each POST with an Idempotency-Key (sends also with a
        # client_msg_id), so a resend is answered as the duplicate it is (docs/operations.md#upgrades).
        proxy_next_upstream error timeout http_503 non_idempotent;
        proxy_connect_timeout 2s;
        location / { proxy_pass http://parley; }
$sends_location
    }
}
EOF
}

start_nginx() {
    find_nginx
    write_nginx_conf
    "$NGINX" -t -c "$DIR/nginx.conf" >"$DIR/nginx-test.log" 2>&1 || { cat "$DIR/nginx-test.log" >&2; die "nginx rejects $DIR/nginx.conf"; }
    "$NGINX" -c "$DIR/nginx.conf" >>"$DIR/nginx-error.log" 2>&1 &
    echo $! >"$DIR/nginx.pid"
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$LB_PORT/readyz" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    die "nginx does not answer on 127.0.0.1:$LB_PORT (see $DIR/nginx-error.log)"
}

# --- commands ----------------------------------------------------------------------------------------------------

load_env() { [[ -f $ENV_FILE ]] || die "no cluster at $DIR (scripts/cluster.sh up)"; set -a; source "$ENV_FILE"; set +a; }

up() {
    local nodes=${1:-3} n ports=() key
    [[ -x $BINARY ]] || die "no $BINARY (swift build -c release --product parley)"
    command -v python3 >/dev/null && command -v curl >/dev/null || die "python3 and curl are needed"
    if [[ -f $ENV_FILE ]]; then
        for name in postgres nginx $(seq -f 'node%g' 1 9); do alive "$(pid_of "$name")" && die "the cluster at $DIR runs ($name); scripts/cluster.sh down first"; done
    fi
    mkdir -p "$DIR"
    chmod 755 "$DIR"  # the postgres user must reach the socket and data directories inside
    start_postgres
    for _ in $(seq "$nodes"); do ports+=("$(free_port)"); done
    NODE_PORTS="${ports[*]}"
    LB_PORT=$(free_port)
    DATABASE_URL="host=$DIR/run port=5432 user=parley dbname=postgres"
    PARLEY_ADMIN_KEY=$(grep -s '^PARLEY_ADMIN_KEY=' "$ENV_FILE" | cut -d= -f2- || true)
    [[ -n $PARLEY_ADMIN_KEY ]] || PARLEY_ADMIN_KEY=cluster-admin-$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    PARLEY_KEY=$(grep -s '^PARLEY_KEY=' "$ENV_FILE" | cut -d= -f2- || true)
    # All nodes at the same moment: they race for the migrations' advisory lock, and each file is applied once.
    for n in $(seq "$nodes"); do start_node "$n"; done
    for n in $(seq "$nodes"); do wait_node "$n"; done
    start_nginx
    CLUSTER_URL="http://127.0.0.1:$LB_PORT"
    if [[ -z $PARLEY_KEY ]]; then
        key=$(curl -sf -X POST "$CLUSTER_URL/v1/apps" -H "Authorization: Bearer $PARLEY_ADMIN_KEY" \
            -H 'Content-Type: application/json' -d '{"app_id":"cluster","name":"cluster"}') || die "could not create the app"
        PARLEY_KEY=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["key"]["secret"])' "$key")
    fi
    cat >"$ENV_FILE" <<EOF
CLUSTER_URL=$CLUSTER_URL
LB_PORT=$LB_PORT
NODE_PORTS="$NODE_PORTS"
DATABASE_URL="$DATABASE_URL"
PARLEY_ADMIN_KEY=$PARLEY_ADMIN_KEY
PARLEY_KEY=$PARLEY_KEY
EOF
    chmod 600 "$ENV_FILE"
    say "up: nginx $CLUSTER_URL over $nodes node(s) on ports $NODE_PORTS; PostgreSQL on $DIR/run"
    say "source $ENV_FILE for CLUSTER_URL and PARLEY_KEY (app \"cluster\")"
}

down() {
    [[ -d $DIR ]] || return 0
    stop_pid nginx TERM
    local name
    for name in $(cd "$DIR" && ls node*.pid 2>/dev/null | sed 's/\.pid$//'); do stop_pid "$name" TERM; done
    stop_pid postgres INT  # fast shutdown
    say "down ($DIR kept)"
}

status() {
    load_env
    local name pid port state
    printf '%-10s %-8s %-6s %s\n' process pid port state
    pid=$(pid_of postgres); alive "$pid" && state=running || state=stopped
    printf '%-10s %-8s %-6s %s\n' postgres "${pid:--}" - "$state"
    pid=$(pid_of nginx)
    state=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$LB_PORT/readyz" 2>/dev/null || true)
    printf '%-10s %-8s %-6s %s\n' nginx "${pid:--}" "$LB_PORT" "$(alive "$pid" && echo "running, /readyz $state" || echo stopped)"
    local n=1
    for port in $NODE_PORTS; do
        pid=$(pid_of "node$n")
        state=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" 2>/dev/null || true)
        printf '%-10s %-8s %-6s %s\n' "node$n" "${pid:--}" "$port" "$(alive "$pid" && echo "running, /readyz $state" || echo stopped)"
        n=$((n + 1))
    done
}

case ${1:-} in
    up) up "${2:-3}" ;;
    down) down ;;
    status) status ;;
    kill)
        load_env
        pid=$(pid_of "node${2:?node number}")
        alive "$pid" || die "node $2 does not run"
        kill -KILL "$pid"
        for _ in $(seq 100); do alive "$pid" || break; sleep 0.05; done
        rm -f "$DIR/node$2.pid"
        say "node $2 ($pid) killed"
        ;;
    start)
        load_env
        alive "$(pid_of "node${2:?node number}")" && die "node $2 runs"
        start_node "$2"
        wait_node "$2"
        say "node $2 ready again ($(pid_of "node$2"))"
        ;;
    restart)
        load_env
        n=${2:?node number}
        pid=$(pid_of "node$n")
        alive "$pid" || die "node $n does not run"
        began=$(date +%s%N)
        kill -TERM "$pid"
        for _ in $(seq 200); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && die "node $n ($pid) still runs 20 s after SIGTERM"
        drained=$(date +%s%N)
        rm -f "$DIR/node$n.pid"
        start_node "$n"
        wait_node "$n"
        say "node $n restarted: drained and exited in $(((drained - began) / 1000000)) ms, ready again $((($(date +%s%N) - drained) / 1000000)) ms later"
        ;;
    *) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

#!/bin/sh
# local-cluster.sh: N replicas of `anyllm serve` on this machine behind a private nginx.
#
#   deploy/local-cluster.sh start N [-m MODEL] [-p PORT] [-t THREADS] [-d DIR] [-o "OPTIONS"]
#   deploy/local-cluster.sh status [-d DIR]
#   deploy/local-cluster.sh restart I [-d DIR]
#   deploy/local-cluster.sh stop [-d DIR]
#
# start: replica I (1 to N) is `anyllm serve` on 127.0.0.1:PORT+I, with its log, pid
# file and exit status in DIR; nginx listens on 127.0.0.1:PORT with
# deploy/nginx-anyllm.conf.in filled in for them. That nginx is a private one: its own
# configuration, pid file, logs and temporary files in DIR, run as the current user;
# the system's nginx is not touched. Waits until every replica answers /health, then
# prints the balancer's base URL as its last line. -p 0 picks free ports. OPTIONS go
# to every `anyllm serve` (e.g. "--parallel 8 --drain-timeout 60").
# Defaults: PORT 8080, MODEL models/SmolLM2-135M-Instruct.Q4_1.gguf of this repository,
# THREADS 1 per replica, DIR build/cluster (or $ANYLLM_CLUSTER_DIR), the binary
# build/anyllm (or $ANYLLM_BIN, or anyllm on the PATH), nginx from the PATH or
# /usr/sbin (or $ANYLLM_NGINX; not $NGINX, which nginx itself reads: inherited sockets).
# status: one line per replica, "replica I pid PID port PORT health STATE", STATE one
# of ready, loading, draining, down (with the exit status when it has ended); then one
# line for the balancer.
# restart I: drains replica I if it runs (SIGTERM, then waits for it to exit), starts
# it again with the same options and waits until it is ready. A rolling restart is
# `restart 1`, `restart 2`, ... (nginx sends nothing to a draining replica).
# stop: SIGTERM to every replica, which drain (finish what they have, see anyllm serve
# --drain-timeout), then SIGQUIT to nginx, which finishes what it is passing on.
#
# Needs sh, nginx and python3 (the health checks and free ports; standard library only).
set -u

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
HEALTH_WAIT_S=120   # a replica must be ready within this (a large model loads slowly)
STOP_WAIT_S=90      # a draining replica must have exited within this
MAX_FAILS=1         # nginx: failures within FAIL_TIMEOUT that take a replica out ...
FAIL_TIMEOUT=3s     # ... for this long; then one request tries it again

die() { echo "local-cluster.sh: $*" >&2; exit 1; }

usage() {
    sed -n '3,7p' "$0" | sed 's/^# *//' >&2
    exit 2
}

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }

pid_of() { cat "$dir/$1.pid" 2>/dev/null; }

# The /health of a base URL as "STATUS STATE" ("200 ready", "503 draining"), or "down".
health() {
    python3 - "$1" <<'EOF'
import json, sys, urllib.error, urllib.request
try:
    r = urllib.request.urlopen(sys.argv[1] + "/health", timeout=3)
except urllib.error.HTTPError as e:
    r = e
except Exception:
    print("down")
    sys.exit(0)
try:
    print(r.status, json.load(r).get("state", "unknown"))
except Exception:
    print(r.status, "unknown")
EOF
}

free_ports() {
    python3 -c 'import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}

# Single-quotes a value for cluster.env, which `restart` and `stop` read back.
quote() { printf "'%s'" "$(printf %s "$1" | sed "s/'/'\\\\''/g")"; }

# Starts replica $1 in the background. The subshell stays to write the exit status,
# which `status` shows and tests read (0 after a drain).
start_replica() {
    i=$1
    port=$(cat "$dir/replica-$i.port")
    rm -f "$dir/replica-$i.exit" "$dir/replica-$i.pid"
    echo "---- $(date '+%F %T') start" >>"$dir/replica-$i.log"
    (
        # SERVE_OPTS is split into words on purpose
        # shellcheck disable=SC2086
        "$BIN" serve -m "$MODEL" --host 127.0.0.1 --port "$port" -t "$THREADS" \
            --max-conns-per-ip 0 $SERVE_OPTS </dev/null >>"$dir/replica-$i.log" 2>&1 &
        echo $! >"$dir/replica-$i.pid"
        wait $!
        echo $? >"$dir/replica-$i.exit"
    ) </dev/null >/dev/null 2>&1 & # not holding the caller's output open (a pipe's reader waits for its end)
    n=0
    until [ -s "$dir/replica-$i.pid" ]; do
        n=$((n + 1)); [ $n -gt 100 ] && die "replica $i did not start"
        sleep 0.05
    done
}

# Waits until replica $1 answers /health with 200; on failure shows its log's end.
wait_ready() {
    i=$1
    port=$(cat "$dir/replica-$i.port")
    t=0
    while :; do
        case $(health "http://127.0.0.1:$port") in "200 "*) return 0 ;; esac
        if ! alive "$(pid_of "replica-$i")"; then
            tail -n 5 "$dir/replica-$i.log" >&2
            die "replica $i (port $port) exited during start-up; its log is $dir/replica-$i.log"
        fi
        t=$((t + 1))
        [ $t -gt $((HEALTH_WAIT_S * 5)) ] && die "replica $i (port $port) not ready after $HEALTH_WAIT_S s"
        sleep 0.2
    done
}

# Sends SIGTERM to replica $1 if it runs and waits for it to exit.
drain_replica() {
    pid=$(pid_of "replica-$1")
    alive "$pid" || return 0
    kill -TERM "$pid"
    t=0
    while alive "$pid"; do
        t=$((t + 1))
        if [ $t -gt $((STOP_WAIT_S * 10)) ]; then
            echo "local-cluster.sh: replica $1 (pid $pid) still runs after $STOP_WAIT_S s; SIGKILL" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
        sleep 0.1
    done
}

write_nginx_conf() {
    servers=""
    i=1
    while [ $i -le "$N" ]; do
        servers="$servers    server 127.0.0.1:$(cat "$dir/replica-$i.port") max_fails=$MAX_FAILS fail_timeout=$FAIL_TIMEOUT;\\n"
        i=$((i + 1))
    done
    awk -v servers="$servers" -v listen="127.0.0.1:$PORT" \
        '{ gsub(/@LISTEN@/, listen) } $0 == "@SERVERS@" { printf "%s", servers; next } { print }' \
        "$here/nginx-anyllm.conf.in" >"$dir/anyllm.conf" || die "cannot write $dir/anyllm.conf"
    mkdir -p "$dir/tmp"
    cat >"$dir/nginx.conf" <<EOF
# written by deploy/local-cluster.sh: a private nginx for the replicas in this folder
worker_processes 1;
pid "$dir/nginx.pid";
error_log "$dir/nginx-error.log" warn;
events { worker_connections 1024; }
http {
    log_format anyllm '\$remote_addr [\$time_local] "\$request" \$status \$body_bytes_sent '
                      'upstream "\$upstream_addr" "\$upstream_status" \$request_time s';
    access_log "$dir/nginx-access.log" anyllm;
    client_body_temp_path "$dir/tmp/body";
    proxy_temp_path "$dir/tmp/proxy";
    fastcgi_temp_path "$dir/tmp/fastcgi";
    uwsgi_temp_path "$dir/tmp/uwsgi";
    scgi_temp_path "$dir/tmp/scgi";
    include "$dir/anyllm.conf";
}
EOF
}

# Runs nginx with our configuration: -e opens its error log before the configuration
# is read (else a user other than root is refused the system's /var/log/nginx); NGINX
# is unset because nginx takes it for sockets inherited from an older nginx; its output
# goes to the log, so that the daemon keeps no descriptor of the caller's.
run_nginx() {
    # shellcheck disable=SC2094 # nginx appends to its log as we do
    (unset NGINX; exec "$NGINX_BIN" -p "$dir/" -c "$dir/nginx.conf" -e "$dir/nginx-error.log" "$@") \
        </dev/null >>"$dir/nginx-error.log" 2>&1
}

start_nginx() {
    write_nginx_conf
    run_nginx -t -q || { tail -n 3 "$dir/nginx-error.log" >&2; die "nginx refuses $dir/nginx.conf"; }
    run_nginx || { tail -n 3 "$dir/nginx-error.log" >&2; die "nginx did not start"; }
    n=0
    until alive "$(pid_of nginx)"; do
        n=$((n + 1))
        [ $n -gt 100 ] && { tail -n 3 "$dir/nginx-error.log" >&2; die "nginx did not start"; }
        sleep 0.05
    done
}

cmd_start() {
    [ $# -ge 1 ] || usage
    N=$1; shift
    case $N in '' | *[!0-9]*) die "start: N must be a number of replicas, not '$N'" ;; esac
    if [ "$N" -lt 1 ] || [ "$N" -gt 64 ]; then die "start: N must be 1 to 64"; fi
    MODEL=${ANYLLM_MODEL:-$repo/models/SmolLM2-135M-Instruct.Q4_1.gguf}
    PORT=8080 THREADS=1 SERVE_OPTS=""
    while [ $# -gt 0 ]; do
        [ $# -ge 2 ] || die "start: option $1 needs a value"
        case $1 in
            -m) MODEL=$2 ;;
            -p) PORT=$2 ;;
            -t) THREADS=$2 ;;
            -d) dir=$2 ;;
            -o) SERVE_OPTS=$2 ;;
            *) die "start: unknown option $1" ;;
        esac
        shift 2
    done
    case $PORT in '' | *[!0-9]*) die "start: -p takes a port number" ;; esac
    BIN=${ANYLLM_BIN:-$repo/build/anyllm}
    [ -x "$BIN" ] || BIN=$(command -v anyllm) || die "no anyllm binary: run make, or set ANYLLM_BIN"
    NGINX_BIN=${ANYLLM_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
    [ -x "$NGINX_BIN" ] || die "no nginx at $NGINX_BIN: install it (Debian: apt-get install nginx)"
    command -v python3 >/dev/null || die "python3 is needed for the health checks"
    [ -f "$MODEL" ] || die "no model at $MODEL (make models, or -m FILE)"
    # absolute, so that `restart` works from any folder
    MODEL=$(abspath "$MODEL")
    case $BIN in */*) BIN=$(abspath "$BIN") ;; esac
    mkdir -p "$dir" || die "cannot create $dir"
    dir=$(cd "$dir" && pwd)
    [ -f "$dir/cluster.env" ] && alive "$(pid_of nginx)" && die "a cluster already runs in $dir; stop it first"
    if [ "$PORT" -eq 0 ]; then
        # shellcheck disable=SC2046 # one word per port
        set -- $(free_ports $((N + 1)))
        PORT=$1; shift
    else
        # shellcheck disable=SC2046 # one word per port
        set -- $(i=1; while [ $i -le "$N" ]; do echo $((PORT + i)); i=$((i + 1)); done)
    fi
    rm -f "$dir"/replica-*
    i=1
    for p in "$@"; do echo "$p" >"$dir/replica-$i.port"; i=$((i + 1)); done
    {
        echo "N=$N"; echo "PORT=$PORT"; echo "THREADS=$THREADS"
        echo "BIN=$(quote "$BIN")"; echo "MODEL=$(quote "$MODEL")"
        echo "NGINX_BIN=$(quote "$NGINX_BIN")"; echo "SERVE_OPTS=$(quote "$SERVE_OPTS")"
    } >"$dir/cluster.env"
    i=1
    while [ $i -le "$N" ]; do start_replica $i; i=$((i + 1)); done
    i=1
    while [ $i -le "$N" ]; do wait_ready $i; i=$((i + 1)); done
    start_nginx
    echo "$N replicas on ports $*; nginx: $dir/nginx.conf; logs and pid files in $dir"
    echo "http://127.0.0.1:$PORT"
}

load_env() {
    [ -f "$dir/cluster.env" ] || die "no cluster in $dir (start one first)"
    # shellcheck disable=SC1091 # written by cmd_start
    . "$dir/cluster.env"
}

cmd_status() {
    load_env
    i=1
    while [ $i -le "$N" ]; do
        port=$(cat "$dir/replica-$i.port")
        pid=$(pid_of "replica-$i")
        if alive "$pid"; then
            state=$(health "http://127.0.0.1:$port")
            state=${state#* } # "200 ready" -> "ready"; "down" stays
        else
            state="down (exit $(cat "$dir/replica-$i.exit" 2>/dev/null || echo unknown))"
        fi
        echo "replica $i pid ${pid:-none} port $port health $state"
        i=$((i + 1))
    done
    if alive "$(pid_of nginx)"; then echo "balancer pid $(pid_of nginx) http://127.0.0.1:$PORT"
    else echo "balancer down"; fi
}

cmd_restart() {
    [ $# -ge 1 ] || usage
    i=$1; shift
    [ $# -ge 2 ] && [ "$1" = -d ] && dir=$2
    load_env
    case $i in '' | *[!0-9]*) die "restart: I must be a replica number" ;; esac
    if [ "$i" -lt 1 ] || [ "$i" -gt "$N" ]; then die "restart: replica $i does not exist (1 to $N)"; fi
    drain_replica "$i"
    start_replica "$i"
    wait_ready "$i"
    echo "replica $i ready on port $(cat "$dir/replica-$i.port") (pid $(pid_of "replica-$i"))"
}

cmd_stop() {
    load_env
    i=1
    while [ $i -le "$N" ]; do
        pid=$(pid_of "replica-$i")
        alive "$pid" && kill -TERM "$pid"
        i=$((i + 1))
    done
    i=1
    while [ $i -le "$N" ]; do drain_replica $i; i=$((i + 1)); done
    pid=$(pid_of nginx)
    if alive "$pid"; then
        kill -QUIT "$pid"
        t=0
        while alive "$pid"; do
            t=$((t + 1))
            [ $t -eq 100 ] && kill -TERM "$pid" 2>/dev/null
            sleep 0.1
        done
    fi
    echo "stopped: $N replicas and nginx"
}

dir=${ANYLLM_CLUSTER_DIR:-$repo/build/cluster}
[ $# -ge 1 ] || usage
cmd=$1; shift
case $cmd in
    start) cmd_start "$@" ;;
    status | stop)
        [ $# -ge 2 ] && [ "$1" = -d ] && dir=$2
        "cmd_$cmd" ;;
    restart) cmd_restart "$@" ;;
    *) usage ;;
esac

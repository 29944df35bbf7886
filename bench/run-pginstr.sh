#!/usr/bin/env bash
# Counts the instructions sluice executes per PostgreSQL transaction and per connect-per-
# transaction login, under valgrind's callgrind: deterministic where CPU time on this shared
# machine is not, so that a change to the hot path can be judged by one run.
#
# A throwaway PostgreSQL 15 (initdb in a temporary directory, SCRAM for TCP logins, pgbench
# -i -s 1) and one sluice under callgrind (one worker thread, the server as writer and
# reader, monitor off); for each case pgbench warms sluice up, then callgrind's counters are
# read after N and after 6N transactions per client: the difference divided by 5N x clients
# is what one more transaction costs, start-up and pool growth left out.
#
# Cases: select-only (-S) with -M simple and -M prepared at 1 and 16 clients, and -C (a
# SCRAM login, one SELECT, a close) at 4 clients. Valgrind hides SHA-NI, so the login's
# SHA-256 work counts more instructions than it costs on a CPU with it.
#
# Usage: bench/run-pginstr.sh [--sluice BINARY] [--n N]   (default: the release build, N 400)
# Installs what it needs when missing (valgrind, PostgreSQL 15 with pgbench, Rust).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

SLUICE=""
N=400
while [ $# -gt 0 ]; do
    case "$1" in
        --sluice) SLUICE="$2"; shift 2 ;;
        --n) N="$2"; shift 2 ;;
        *) echo "usage: bench/run-pginstr.sh [--sluice BINARY] [--n N]" >&2; exit 2 ;;
    esac
done

apt_install valgrind postgresql-15 postgresql-client-15
if [ -z "$SLUICE" ]; then
    apt_install build-essential pkg-config cmake ca-certificates
    ensure_rust
    cargo build --release -p sluice --bin sluice
    SLUICE="$ROOT/target/release/sluice"
fi
PGBIN=/usr/lib/postgresql/15/bin
id postgres >/dev/null 2>&1 || { echo "error: no 'postgres' user; install postgresql-15" >&2; exit 1; }

free_port() {
    local p
    for p in $(seq "$1" $(($1 + 200))); do
        if ! ss -ltnH "sport = :$p" | grep -q .; then echo "$p"; return 0; fi
    done
    echo "error: no free port from $1" >&2; exit 1
}

D=$(mktemp -d /tmp/sluice-pginstr.XXXXXX)
chmod 755 "$D"
VPID=""
cleanup() {
    [ -n "$VPID" ] && kill "$VPID" 2>/dev/null && wait "$VPID" 2>/dev/null
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$D/pg" stop -m immediate >/dev/null 2>&1 || true
    rm -rf "$D"
}
trap cleanup EXIT

PGPORT=$(free_port 7470)
mkdir "$D/pg" && chown postgres "$D/pg" && chown postgres "$D"
runuser -u postgres -- "$PGBIN/initdb" -D "$D/pg" -A trust --auth-host=scram-sha-256 >/dev/null
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$D/pg" -l "$D/pg.log" -w \
    -o "-p $PGPORT -k $D -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off -c synchronous_commit=off" \
    start >/dev/null
psql -qX -h "$D" -p "$PGPORT" -U postgres -c "CREATE ROLE app LOGIN PASSWORD 'app'; GRANT CREATE ON SCHEMA public TO app" postgres >/dev/null
PGPASSWORD=app pgbench -h 127.0.0.1 -p "$PGPORT" -U app -i -s 1 -q postgres >/dev/null 2>&1

PORT=$(free_port 7480)
cat > "$D/sluice.toml" <<EOF
[proxy]
worker_threads = 1
[[listeners]]
listen = "127.0.0.1:$PORT"
protocol = "postgres"
[[users]]
name = "app"
password = "app"
[[servers]]
address = "127.0.0.1:$PGPORT"
protocol = "postgres"
hostgroup = "writer"
max_connections = 100
[[servers]]
address = "127.0.0.1:$PGPORT"
protocol = "postgres"
hostgroup = "reader"
max_connections = 100
[monitor]
enabled = false
[log]
level = "warn"
EOF

valgrind --tool=callgrind --callgrind-out-file="$D/cg.out" "$SLUICE" --config "$D/sluice.toml" > "$D/cg.log" 2>&1 &
VPID=$!
for _ in $(seq 1 240); do
    PGPASSWORD=app psql -qX -h 127.0.0.1 -p "$PORT" -U app -c "select 1" postgres >/dev/null 2>&1 && break
    kill -0 "$VPID" 2>/dev/null || { cat "$D/cg.log" >&2; echo "error: sluice under callgrind exited" >&2; exit 1; }
    sleep 0.5
done

DUMPS=0
# dump K: writes callgrind's counters since the last zeroing (its K-th dump); prints their sum.
dump() {
    callgrind_control -d "$VPID" >/dev/null 2>&1
    local f="$D/cg.out.$1" total=""
    # callgrind_control returns once the command is taken; the file is complete at "totals:".
    for _ in $(seq 1 600); do
        grep -q '^totals:' "$f" 2>/dev/null && total=$(awk '/^summary:/ {print $2; exit}' "$f")
        [ -n "$total" ] && break
        sleep 0.1
    done
    [ -n "$total" ] || { echo "error: callgrind wrote no $f" >&2; exit 1; }
    echo "$total"
}
run() { # run CLIENTS TXNS_PER_CLIENT PGBENCH_ARGS...
    local c=$1 t=$2; shift 2
    local out
    out=$(PGPASSWORD=app pgbench -h 127.0.0.1 -p "$PORT" -U app -n "$@" -c "$c" -j $((c < 2 ? c : 2)) -t "$t" postgres 2>&1)
    grep -q "actually processed: $((c * t))/" <<< "$out" || { echo "$out" >&2; echo "error: pgbench failed" >&2; exit 1; }
}
measure() { # measure LABEL CLIENTS PGBENCH_ARGS...
    local label=$1 c=$2; shift 2
    run "$c" "$N" "$@"
    local a b
    callgrind_control -z "$VPID" >/dev/null 2>&1; run "$c" "$N" "$@"
    DUMPS=$((DUMPS + 1)); a=$(dump "$DUMPS") || exit 1
    callgrind_control -z "$VPID" >/dev/null 2>&1; run "$c" $((6 * N)) "$@"
    DUMPS=$((DUMPS + 1)); b=$(dump "$DUMPS") || exit 1
    printf '| %s | %d | %s |\n' "$label" "$c" "$(( (b - a) / (5 * N * c) ))"
}

echo "sluice: $SLUICE; $N and $((6 * N)) transactions per client and case"
echo
echo "| case | clients | instructions per transaction |"
echo "| --- | ---: | ---: |"
measure "select-only, -M simple" 1 -S -M simple
measure "select-only, -M simple" 16 -S -M simple
measure "select-only, -M prepared" 1 -S -M prepared
measure "select-only, -M prepared" 16 -S -M prepared
measure "-C: SCRAM login + SELECT + close" 4 -S -C

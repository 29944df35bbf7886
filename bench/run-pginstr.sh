#!/usr/bin/env bash
# Counts the instructions sluice executes per PostgreSQL transaction and per connect-per-
# transaction login, under valgrind's callgrind: deterministic where CPU time on this shared
# machine is not, so that a change to the hot path can be judged by one run. PgBouncer
# (transaction pooling, the role's SCRAM secret from pg_authid in its auth file, so that a
# login derives no key) is counted the same way in the same run, unless --no-pgbouncer, and so
# is the floor (bench/src/bin/pgfloor.rs: the least a transaction pooler on tokio does, for the
# simple-protocol cases; its server connections come from 127.0.0.2, which the server trusts).
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
# Usage: bench/run-pginstr.sh [--sluice BINARY] [--n N] [--no-pgbouncer]
#        (default: the release build, N 400)
# Installs what it needs when missing (valgrind, PostgreSQL 15 with pgbench, PgBouncer, Rust).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

SLUICE=""
N=400
PGBOUNCER=1
while [ $# -gt 0 ]; do
    case "$1" in
        --sluice) SLUICE="$2"; shift 2 ;;
        --n) N="$2"; shift 2 ;;
        --no-pgbouncer) PGBOUNCER=""; shift ;;
        *) echo "usage: bench/run-pginstr.sh [--sluice BINARY] [--n N] [--no-pgbouncer]" >&2; exit 2 ;;
    esac
done

apt_install valgrind postgresql-15 postgresql-client-15
if [ -n "$PGBOUNCER" ]; then apt_install pgbouncer; fi
source "$ROOT/bench/pg-lib.sh"
sluice_and_floor

D=$(mktemp -d /tmp/sluice-pginstr.XXXXXX)
chmod 755 "$D"
VPID=""
BPID=""
cleanup() {
    # Every step runs: a process killed here exits non-zero, which must not stop the rest.
    set +e
    [ -n "$VPID" ] && kill "$VPID" 2>/dev/null && wait "$VPID" 2>/dev/null
    [ -n "$BPID" ] && kill "$BPID" 2>/dev/null && wait "$BPID" 2>/dev/null
    pg_teardown "$D"
}
trap cleanup EXIT

PGPORT=$(free_port 7470)
pg_throwaway "$D" "$PGPORT" 1 max_connections=200

PORT=$(free_port 7480)
sluice_pg_config "$PORT" "$PGPORT" 100 > "$D/sluice.toml"

# The counted process: its port, its pid, its callgrind output, and how to run
# callgrind_control as the user it runs as (set per target below).
PORT_NOW=""; PID_NOW=""; OUT_NOW=""; AS=()

# wait_up LOG: until a login through PORT_NOW works (slow to start under valgrind).
wait_up() {
    for _ in $(seq 1 240); do
        PGPASSWORD=app psql -qX -h 127.0.0.1 -p "$PORT_NOW" -U app -c "select 1" postgres >/dev/null 2>&1 && return 0
        kill -0 "$PID_NOW" 2>/dev/null || { cat "$1" >&2; echo "error: the process under callgrind exited" >&2; exit 1; }
        sleep 0.5
    done
    echo "error: nothing answers on port $PORT_NOW" >&2; exit 1
}

valgrind --tool=callgrind --callgrind-out-file="$D/cg.out" "$SLUICE" --config "$D/sluice.toml" > "$D/cg.log" 2>&1 &
VPID=$!
PORT_NOW=$PORT; PID_NOW=$VPID; OUT_NOW="$D/cg.out"; AS=()
wait_up "$D/cg.log"

DUMPS=0
# dump K: writes callgrind's counters since the last zeroing (its K-th dump); prints their sum.
dump() {
    "${AS[@]}" callgrind_control -d "$PID_NOW" >/dev/null 2>&1
    local f="$OUT_NOW.$1" total=""
    # callgrind_control returns once the command is taken; the file is complete at "totals:".
    for _ in $(seq 1 600); do
        grep -q '^totals:' "$f" 2>/dev/null && total=$(awk '/^summary:/ {print $2; exit}' "$f")
        [ -n "$total" ] && break
        sleep 0.1
    done
    [ -n "$total" ] || { echo "error: callgrind wrote no $f" >&2; exit 1; }
    echo "$total"
}
FAILED=""
# run CLIENTS TXNS_PER_CLIENT PGBENCH_ARGS...: fails (FAILED: pgbench's first error) unless
# every transaction went through.
run() {
    local c=$1 t=$2; shift 2
    local out
    out=$(PGPASSWORD=app pgbench -h 127.0.0.1 -p "$PORT_NOW" -U app -n "$@" -c "$c" -j $((c < 2 ? c : 2)) -t "$t" postgres 2>&1)
    grep -q "actually processed: $((c * t))/" <<< "$out" && return 0
    FAILED=$(grep -m1 -i "error" <<< "$out")
    return 1
}
# measure LABEL CLIENTS PGBENCH_ARGS...: one row. sluice must run every case; a case PgBouncer
# cannot run (1.18 with -M prepared and several clients) is shown with pgbench's error.
measure() {
    local label=$1 c=$2; shift 2
    local a b
    if ! { run "$c" "$N" "$@" &&
        "${AS[@]}" callgrind_control -z "$PID_NOW" >/dev/null 2>&1 && run "$c" "$N" "$@"; }; then
        [ "$TARGET" = sluice ] && { echo "error: pgbench through sluice failed: $FAILED" >&2; exit 1; }
        printf '| %s | %s | %d | — (%s) |\n' "$TARGET" "$label" "$c" "$FAILED"
        return 0
    fi
    DUMPS=$((DUMPS + 1)); a=$(dump "$DUMPS") || exit 1
    "${AS[@]}" callgrind_control -z "$PID_NOW" >/dev/null 2>&1
    run "$c" $((6 * N)) "$@" || { echo "error: pgbench failed: $FAILED" >&2; exit 1; }
    DUMPS=$((DUMPS + 1)); b=$(dump "$DUMPS") || exit 1
    printf '| %s | %s | %d | %s |\n' "$TARGET" "$label" "$c" "$(( (b - a) / (5 * N * c) ))"
}
cases() {
    measure "select-only, -M simple" 1 -S -M simple
    measure "select-only, -M simple" 16 -S -M simple
    measure "select-only, -M prepared" 1 -S -M prepared
    measure "select-only, -M prepared" 16 -S -M prepared
    measure "-C: SCRAM login + SELECT + close" 4 -S -C
}

echo "sluice: $SLUICE; $N and $((6 * N)) transactions per client and case"
echo
echo "| target | case | clients | instructions per transaction |"
echo "| --- | --- | ---: | ---: |"
TARGET=sluice
cases
kill "$VPID" 2>/dev/null; wait "$VPID" 2>/dev/null || true; VPID=""

FPORT=$(free_port 7500)
valgrind --tool=callgrind --callgrind-out-file="$D/floor.out" "$FLOOR" --listen "127.0.0.1:$FPORT" \
    --server "127.0.0.1:$PGPORT" --source 127.0.0.2 --user app --database postgres > "$D/floor.log" 2>&1 &
VPID=$!
PORT_NOW=$FPORT; PID_NOW=$VPID; OUT_NOW="$D/floor.out"; DUMPS=0
wait_up "$D/floor.log"
TARGET="floor (pgfloor)"
measure "select-only, -M simple" 1 -S -M simple
measure "select-only, -M simple" 16 -S -M simple
kill "$VPID" 2>/dev/null; wait "$VPID" 2>/dev/null || true; VPID=""
[ -n "$PGBOUNCER" ] || exit 0

# PgBouncer refuses to run as root: it runs as postgres, and so does callgrind_control (it
# finds the process through that user's files). setpriv execs: $! is valgrind's own pid.
BPORT=$(free_port 7490)
pgbouncer_files "$D" "$PGPORT" "$BPORT" 100
AS=(setpriv --reuid=postgres --regid=postgres --init-groups)
"${AS[@]}" valgrind --tool=callgrind --callgrind-out-file="$D/pgb.out" pgbouncer "$D/pgbouncer.ini" > "$D/pgb.log" 2>&1 &
BPID=$!
PORT_NOW=$BPORT; PID_NOW=$BPID; OUT_NOW="$D/pgb.out"; DUMPS=0
wait_up "$D/pgb.log"
TARGET="PgBouncer $(pgbouncer --version 2>/dev/null | awk 'NR==1 {print $2}')"
cases

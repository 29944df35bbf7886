#!/usr/bin/env bash
# Compares sluice builds side by side on one PostgreSQL workload: rounds that alternate the
# builds, each a pgbench run through one of them, and for each run the throughput and the
# proxy's CPU per transaction (user + system time from /proc/PID/stat over a window in the
# middle of the run, divided by the transactions pgbench reports for that window). For judging
# what a change to the data path costs, where an instruction count (run-pginstr.sh) misses
# round trips and wake-ups.
#
# A throwaway PostgreSQL 15 (initdb in a temporary directory, SCRAM for TCP logins, pgbench
# -i -s 10, fsync off) and, per run, one sluice (one worker thread, the server as writer and
# reader, monitor off) started in a session of its own (setsid: see "Measuring by hand" in
# docs/benchmarks.md).
#
# Workloads: select-only, tpcb-like (pgbench's built-ins: BEGIN ... END), update-autocommit
# (one UPDATE of a random pgbench_accounts row per transaction, no BEGIN).
#
# Usage: bench/run-pgab.sh [--workload W] [--mode simple|prepared] [--clients C] [--rounds R]
#        [--time SECS] BINARY...   (default: tpcb-like, simple, 16 clients, 3 rounds, 16 s)
# Installs what it needs when missing (PostgreSQL 15 with pgbench).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

WORKLOAD=tpcb-like
MODE=simple
CLIENTS=16
ROUNDS=3
TIME=16
BINS=()
usage() {
    echo "usage: bench/run-pgab.sh [--workload select-only|tpcb-like|update-autocommit] [--mode simple|prepared] [--clients C] [--rounds R] [--time SECS] BINARY..." >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --workload) WORKLOAD="$2"; shift 2 ;;
        --mode) MODE="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --time) TIME="$2"; shift 2 ;;
        -*) usage ;;
        *) BINS+=("$1"); shift ;;
    esac
done
[ ${#BINS[@]} -ge 1 ] || usage
[ "$TIME" -ge 12 ] || { echo "error: --time must be at least 12 s (a window of TIME - 8 s is measured)" >&2; exit 2; }
for b in "${BINS[@]}"; do [ -x "$b" ] || { echo "error: $b is not an executable" >&2; exit 2; }; done

apt_install postgresql-15 postgresql-client-15
source "$ROOT/bench/pg-lib.sh"

D=$(mktemp -d /tmp/sluice-pgab.XXXXXX)
chmod 755 "$D"
SPID=""
cleanup() {
    set +e
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null
    pg_teardown "$D"
}
trap cleanup EXIT

PGPORT=$(free_port 7520)
pg_throwaway "$D" "$PGPORT" 10 max_connections=300 shared_buffers=256MB full_page_writes=off

case "$WORKLOAD" in
    select-only|tpcb-like) ARGS=(-b "$WORKLOAD") ;;
    update-autocommit)
        printf '%s\n' '\set aid random(1, 1000000)' \
            'UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;' > "$D/update.sql"
        ARGS=(-f "$D/update.sql") ;;
    *) usage ;;
esac
case "$MODE" in simple|prepared) ARGS+=(-M "$MODE") ;; *) usage ;; esac

PORT=$(free_port 7540)
sluice_pg_config "$PORT" "$PGPORT" 100 > "$D/sluice.toml"

# ticks PID: the process's user + system time in clock ticks.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
# one BINARY: a pgbench run through it; prints tps and CPU µs per transaction.
one() {
    setsid "$1" --config "$D/sluice.toml" > "$D/sluice.log" 2>&1 &
    SPID=$!
    for _ in $(seq 1 100); do
        PGPASSWORD=app psql -qX -h 127.0.0.1 -p "$PORT" -U app -c "select 1" postgres >/dev/null 2>&1 && break
        sleep 0.1
    done
    PGPASSWORD=app pgbench -h 127.0.0.1 -p "$PORT" -U app -n "${ARGS[@]}" -c "$CLIENTS" -j 2 \
        -T "$TIME" -P 1 postgres > "$D/pgbench.txt" 2>&1 &
    local bench=$!
    sleep 5
    local t1 t2
    t1=$(ticks "$SPID")
    sleep $((TIME - 8))
    t2=$(ticks "$SPID")
    wait "$bench" || { cat "$D/pgbench.txt" >&2; echo "error: pgbench failed" >&2; exit 1; }
    kill "$SPID"; wait "$SPID" 2>/dev/null; SPID=""
    grep -q "number of failed transactions: 0 " "$D/pgbench.txt" \
        || { cat "$D/pgbench.txt" >&2; echo "error: failed transactions" >&2; exit 1; }
    # Transactions in the window: pgbench's per-second progress lines from 5.5 s on.
    awk -v from=5.5 -v to=$((TIME - 3)).5 -v secs=$((TIME - 8)) -v ticks=$((t2 - t1)) -v hz="$HZ" '
        /^progress:/ { t = $2 + 0; if (t > from && t <= to) n += $4 }
        END { printf "%.0f %.1f\n", n / secs, ticks * 1e6 / hz / n }' "$D/pgbench.txt"
}

echo "workload $WORKLOAD, -M $MODE, $CLIENTS clients, $ROUNDS rounds of $TIME s"
echo
echo "| round | build | tps | CPU µs per transaction |"
echo "| ---: | --- | ---: | ---: |"
for r in $(seq 1 "$ROUNDS"); do
    for b in "${BINS[@]}"; do
        one "$b" > "$D/row"
        read -r tps cpu < "$D/row"
        echo "| $r | $b | $tps | $cpu |"
    done
done

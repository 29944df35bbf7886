#!/usr/bin/env bash
# Where a proxy's CPU per PostgreSQL transaction goes: user and kernel time, system calls,
# context switches, and TCP segments, for sluice, PgBouncer and the floor
# (bench/src/bin/pgfloor.rs: the least a transaction pooler on tokio does), each driven by
# pgbench -S -M simple at the same fixed rate, one after the other, against one throwaway
# PostgreSQL 15 (as bench/run-pginstr.sh sets it up; a pool of 300 for each proxy, so that
# no client waits in line).
#
# Per transaction, from the proxy's process: CPU µs (perf's task-clock), its user and kernel
# parts (/proc/PID/stat), system calls (raw_syscalls:sys_enter) and context switches; and,
# for the whole machine, TCP segments sent (nstat: pgbench's and the server's too, so a
# proxy adds two per transaction to direct's two when it sends no ACK of its own).
#
# With --profile, the window is sampled instead (perf record -g, 4,999 Hz) and each proxy's
# samples are split by what the kernel was doing for it (bench/kernel-split.py: waking the
# peer a send wakes, the rest of a send, being preempted by that peer, sleeping in
# epoll_wait, receiving...).
#
# Usage: bench/run-pgkernel.sh [--sluice BINARY] [--clients 16] [--rate 20000] [--time 8]
#                              [--profile]
# Installs what it needs when missing (perf, PostgreSQL 15 with pgbench, PgBouncer, Rust).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

SLUICE=""
CLIENTS=16
RATE=20000
TIME=8
PROFILE=""
usage() { echo "usage: bench/run-pgkernel.sh [--sluice BINARY] [--clients N] [--rate TPS] [--time SECS] [--profile]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --sluice) SLUICE="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --rate) RATE="$2"; shift 2 ;;
        --time) TIME="$2"; shift 2 ;;
        --profile) PROFILE=1; shift ;;
        *) usage ;;
    esac
done

apt_install linux-perf iproute2 python3 postgresql-15 postgresql-client-15 pgbouncer
source "$ROOT/bench/pg-lib.sh"
sluice_and_floor

D=$(mktemp -d /tmp/sluice-pgkernel.XXXXXX)
chmod 755 "$D"
PIDS=()
cleanup() {
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    pg_teardown "$D"
}
trap cleanup EXIT

PGPORT=$(free_port 7670)
pg_throwaway "$D" "$PGPORT" 10 max_connections=1000

PORT=$(free_port 7680)
sluice_pg_config "$PORT" "$PGPORT" 300 > "$D/sluice.toml"
"$SLUICE" --config "$D/sluice.toml" > "$D/sluice.log" 2>&1 &
SPID=$!; PIDS+=("$SPID")

FPORT=$(free_port 7690)
"$FLOOR" --listen "127.0.0.1:$FPORT" --server "127.0.0.1:$PGPORT" --source 127.0.0.2 \
    --user app --database postgres > "$D/floor.log" 2>&1 &
FPID=$!; PIDS+=("$FPID")

BPORT=$(free_port 7700)
pgbouncer_files "$D" "$PGPORT" "$BPORT" 300
chown -R postgres "$D"
runuser -u postgres -- pgbouncer -d "$D/pgbouncer.ini"

up() {
    for _ in $(seq 1 100); do
        PGPASSWORD=app psql -qX -h 127.0.0.1 -p "$1" -U app -c "select 1" postgres >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "error: nothing answers on port $1" >&2; exit 1
}
for p in "$PORT" "$FPORT" "$BPORT"; do up "$p"; done
BPID=$(cat "$D/pgbouncer.pid")

# ticks PID: user and kernel clock ticks so far.
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

echo "clients $CLIENTS, rate $RATE tps, $TIME s each; $(nproc) cores, $(uname -r)"
echo
if [ -n "$PROFILE" ]; then
    echo "Share of each proxy's CPU samples (perf record -g, 4,999 Hz), by what it was doing:"
    echo
    echo "| target | samples | user space | waking the peer | TCP send, the rest | preempted | sleeping | TCP receive | epoll_wait | other kernel |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
else
    echo "| target | tps | CPU µs | user µs | kernel µs | system calls | context switches | TCP segments (machine) |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
fi
for t in "direct:$PGPORT:" "sluice:$PORT:$SPID" "PgBouncer:$BPORT:$BPID" "floor:$FPORT:$FPID"; do
    IFS=: read -r name port pid <<< "$t"
    # (Nothing of direct's is sampled.)
    [ -n "$PROFILE" ] && [ -z "$pid" ] && continue
    PGPASSWORD=app pgbench -h 127.0.0.1 -p "$port" -U app -n -S -M simple -c "$CLIENTS" \
        -j 2 -T 3 postgres > /dev/null 2>&1 || { echo "error: pgbench through $name failed" >&2; exit 1; }
    PGPASSWORD=app pgbench -h 127.0.0.1 -p "$port" -U app -n -S -M simple -c "$CLIENTS" \
        -j 2 -T "$((TIME + 2))" -R "$RATE" postgres > "$D/pgbench.out" 2>&1 &
    PB=$!
    sleep 1
    nstat -n > /dev/null
    if [ -n "$PROFILE" ]; then
        perf record -q -F 4999 -g -o "$D/perf.data" -p "$pid" -- sleep "$TIME" 2> "$D/perf.out"
        wait "$PB" || { echo "error: pgbench through $name failed" >&2; cat "$D/pgbench.out" >&2; exit 1; }
        perf script -i "$D/perf.data" -F ip,sym 2> /dev/null | python3 "$ROOT/bench/kernel-split.py" "$name"
        continue
    fi
    if [ -n "$pid" ]; then
        read -r u0 s0 <<< "$(ticks "$pid")"
        perf stat -x, -e task-clock,raw_syscalls:sys_enter,context-switches -p "$pid" \
            -- sleep "$TIME" 2> "$D/perf.out" > /dev/null
        read -r u1 s1 <<< "$(ticks "$pid")"
    else
        sleep "$TIME"
    fi
    segs=$(nstat | awk '$1 == "TcpOutSegs" {print $2}')
    wait "$PB" || { echo "error: pgbench through $name failed" >&2; cat "$D/pgbench.out" >&2; exit 1; }
    # Transactions in the measured window: the rate pgbench kept, over the window.
    tps=$(awk '/^tps = / {print $3; exit}' "$D/pgbench.out")
    n=$(awk -v t="$tps" -v s="$TIME" 'BEGIN {print t * s}')
    if [ -n "$pid" ]; then
        clk=$(awk -F, '$3 == "task-clock" {print $1}' "$D/perf.out")
        sys=$(awk -F, '$3 == "raw_syscalls:sys_enter" {print $1}' "$D/perf.out")
        cs=$(awk -F, '$3 == "context-switches" {print $1}' "$D/perf.out")
        awk -v name="$name" -v tps="$tps" -v n="$n" -v clk="$clk" -v sys="$sys" -v cs="$cs" \
            -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$HZ" -v segs="$segs" 'BEGIN {
            printf "| %s | %.0f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |\n", name, tps,
                clk * 1000 / n, u * 1e6 / hz / n, s * 1e6 / hz / n, sys / n, cs / n, segs / n }'
    else
        awk -v tps="$tps" -v n="$n" -v segs="$segs" 'BEGIN {
            printf "| direct | %.0f | — | — | — | — | — | %.2f |\n", tps, segs / n }'
    fi
done

#!/usr/bin/env bash
# A burst of clients on a cold pool: pgbench -S -M simple with CLIENTS clients at RATE tps
# against a proxy that has just started (no server connection open yet), through sluice at
# each `[pool] max_connecting` given and through PgBouncer (transaction mode, which opens one
# server connection at a time per pool), each started afresh for its run, in ROUNDS rounds,
# against one throwaway PostgreSQL 15 (pool of 300 per proxy, as bench/run-pgkernel.sh).
#
# Per run: pgbench's average latency and schedule lag (how late transactions started against
# the rate: a proxy that falls behind while its pool grows shows here), the worst lag, and the
# server connections the proxy opened (pg_stat_activity, counted once the run is over).
#
# Usage: bench/run-pgburst.sh [--sluice BINARY] [--clients 256] [--rate 15400] [--time 6]
#                             [--max-connecting "1 4"] [--rounds 2]
# Installs what it needs when missing (PostgreSQL 15 with pgbench, PgBouncer, Rust).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

SLUICE=""
CLIENTS=256
RATE=15400
TIME=6
MAXC="1 4"
ROUNDS=2
usage() { echo "usage: bench/run-pgburst.sh [--sluice BINARY] [--clients N] [--rate TPS] [--time SECS] [--max-connecting \"1 4\"] [--rounds N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --sluice) SLUICE="$2"; shift 2 ;;
        --clients) CLIENTS="$2"; shift 2 ;;
        --rate) RATE="$2"; shift 2 ;;
        --time) TIME="$2"; shift 2 ;;
        --max-connecting) MAXC="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        *) usage ;;
    esac
done

apt_install iproute2 postgresql-15 postgresql-client-15 pgbouncer
source "$ROOT/bench/pg-lib.sh"
sluice_and_floor

D=$(mktemp -d /tmp/sluice-pgburst.XXXXXX)
chmod 755 "$D"
SPID=""
cleanup() {
    set +e
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
    pg_teardown "$D"
}
trap cleanup EXIT

PGPORT=$(free_port 7770)
pg_throwaway "$D" "$PGPORT" 10 max_connections=1000

# app_connections: the server connections role app has open now.
app_connections() {
    psql -qXAt -h "$D" -p "$PGPORT" -U postgres \
        -c "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'" postgres
}
# until_no_app_connections: waits until the last proxy's server connections have gone.
until_no_app_connections() {
    for _ in $(seq 1 100); do
        [ "$(app_connections)" = 0 ] && return 0
        sleep 0.1
    done
    echo "error: role app still has server connections" >&2; exit 1
}
up() {
    for _ in $(seq 1 100); do
        ss -ltnH "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    echo "error: nothing listens on port $1" >&2; exit 1
}
# burst NAME PORT: one cold run through the proxy on PORT; prints its row.
burst() {
    local out
    out=$(PGPASSWORD=app pgbench -h 127.0.0.1 -p "$2" -U app -n -S -M simple -c "$CLIENTS" \
        -j 2 -T "$TIME" -R "$RATE" postgres 2>&1) || { echo "error: pgbench through $1 failed" >&2; echo "$out" >&2; exit 1; }
    awk -v name="$1" -v conns="$(app_connections)" '
        /^tps = / { tps = $3 }
        /^latency average/ { lat = $4 }
        /^rate limit schedule lag/ { lag = $6; max = $8; sub(/\)/, "", max) }
        END { printf "| %s | %.0f | %s | %s | %s | %s |\n", name, tps, lat, lag, max, conns }' <<< "$out"
}

echo "clients $CLIENTS, rate $RATE tps, $TIME s per run, $ROUNDS rounds; $(nproc) cores, $(uname -r)"
echo
echo "| target | tps | latency avg ms | schedule lag avg ms | worst lag ms | server connections opened |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for _ in $(seq 1 "$ROUNDS"); do
    for m in $MAXC; do
        until_no_app_connections
        PORT=$(free_port 7780)
        sluice_pg_config "$PORT" "$PGPORT" 300 > "$D/sluice.toml"
        printf '[pool]\nmax_connecting = %s\n' "$m" >> "$D/sluice.toml"
        "$SLUICE" --config "$D/sluice.toml" > "$D/sluice.log" 2>&1 &
        SPID=$!
        up "$PORT"
        burst "sluice, max_connecting = $m" "$PORT"
        kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""
    done
    until_no_app_connections
    BPORT=$(free_port 7800)
    pgbouncer_files "$D" "$PGPORT" "$BPORT" 300
    chown -R postgres "$D"
    runuser -u postgres -- pgbouncer -d "$D/pgbouncer.ini"
    up "$BPORT"
    burst "PgBouncer" "$BPORT"
    kill "$(cat "$D/pgbouncer.pid")"
    for _ in $(seq 1 50); do [ -f "$D/pgbouncer.pid" ] || break; sleep 0.1; done
done

#!/usr/bin/env bash
# What a long statement text costs the other sessions of sluice's thread: a client sends three
# statements of 50 MB (a string literal; an IN list of 6.25 million numbers) while another
# client sends `SELECT 1` every 2 ms and times each (bench/longtext_probe.py). Side by side in
# one run: directly to the server, through sluice, and through a second sluice build when
# --base is given. PostgreSQL 15 and MariaDB, each a throwaway on this machine; sluice with
# one worker thread (its other sessions share the thread that reads the long text). For MySQL
# the probe also runs pinned (a transaction open: a server connection of its own), apart from
# what the server does with the connection the long statement gives back to the pool.
#
# Usage: bench/run-longtext.sh [--sluice BINARY] [--base BINARY] [--size BYTES]
#        (default: the release build, 50000000 bytes)
# Installs what it needs when missing (PostgreSQL 15, MariaDB, Python drivers, Rust).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

SLUICE=""
BASE=""
SIZE=50000000
while [ $# -gt 0 ]; do
    case "$1" in
        --sluice) SLUICE="$2"; shift 2 ;;
        --base) BASE="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        *) echo "usage: bench/run-longtext.sh [--sluice BINARY] [--base BINARY] [--size BYTES]" >&2; exit 2 ;;
    esac
done

apt_install postgresql-15 postgresql-client-15 python3 python3-venv
ensure_mariadb
source "$ROOT/bench/pg-lib.sh"
if [ -z "$SLUICE" ]; then
    apt_install build-essential pkg-config cmake ca-certificates
    ensure_rust
    cargo build --release -p sluice --bin sluice
    SLUICE="$ROOT/target/release/sluice"
fi
VENV="${CARGO_TARGET_DIR:-$ROOT/target}/pyenv"
[ -x "$VENV/bin/python3" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "psycopg[binary]" PyMySQL
PY="$VENV/bin/python3"

D=$(mktemp -d /tmp/sluice-longtext.XXXXXX)
chmod 755 "$D"
SPIDS=""
MPID=""
cleanup() {
    set +e
    for p in $SPIDS; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    [ -n "$MPID" ] && kill "$MPID" 2>/dev/null && wait "$MPID" 2>/dev/null
    pg_teardown "$D"
}
trap cleanup EXIT

PGPORT=$(free_port 7670)
pg_throwaway "$D" "$PGPORT" 1 max_connections=100
MYPORT=$(free_port 7690)
mkdir "$D/my"
mariadb-install-db --no-defaults --datadir="$D/my" --user=root --auth-root-authentication-method=normal >/dev/null
mariadbd --no-defaults --datadir="$D/my" --user=root --port="$MYPORT" --bind-address=127.0.0.1 \
    --socket="$D/my.sock" --max-allowed-packet=256M --skip-log-bin > "$D/my.log" 2>&1 &
MPID=$!
for _ in $(seq 150); do mariadb -S "$D/my.sock" -uroot -e "SELECT 1" >/dev/null 2>&1 && break; sleep 0.2; done
mariadb -S "$D/my.sock" -uroot -e "DROP USER IF EXISTS ''@'localhost'; DROP USER IF EXISTS ''@'$(hostname)';
    CREATE USER app@'%' IDENTIFIED BY 'app'; GRANT ALL ON *.* TO app@'%';
    CREATE USER app@localhost IDENTIFIED BY 'app'; GRANT ALL ON *.* TO app@localhost"

# sluice_config PGLISTEN MYLISTEN: both listeners, each server as writer and reader.
sluice_config() {
    cat <<CONF
[proxy]
worker_threads = 1
[mysql]
max_packet_size = 134217728
[[listeners]]
listen = "127.0.0.1:$1"
protocol = "postgres"
[[listeners]]
listen = "127.0.0.1:$2"
protocol = "mysql"
[[users]]
name = "app"
password = "app"
[[servers]]
address = "127.0.0.1:$PGPORT"
protocol = "postgres"
hostgroup = "writer"
max_connections = 20
[[servers]]
address = "127.0.0.1:$PGPORT"
protocol = "postgres"
hostgroup = "reader"
max_connections = 20
[[servers]]
address = "127.0.0.1:$MYPORT"
hostgroup = "writer"
max_connections = 20
[[servers]]
address = "127.0.0.1:$MYPORT"
hostgroup = "reader"
max_connections = 20
[monitor]
enabled = false
[log]
level = "warn"
CONF
}

# target NAME PGPORT MYPORT: the probes against one target.
target() {
    echo "== $1"
    for kind in literal inlist; do
        "$PY" "$ROOT/bench/longtext_probe.py" pg "$2" "$SIZE" "$kind"
        "$PY" "$ROOT/bench/longtext_probe.py" my "$3" "$SIZE" "$kind"
        "$PY" "$ROOT/bench/longtext_probe.py" my "$3" "$SIZE" "$kind" pinned
    done
}

echo "machine: $(nproc) CPUs, $(uname -r); sluice $SLUICE${BASE:+, base $BASE}; $SIZE bytes"
target direct "$PGPORT" "$MYPORT"
n=0
for bin in $BASE $SLUICE; do
    n=$((n + 1))
    P=$(free_port $((7700 + 10 * n)))
    M=$(free_port $((P + 1)))
    sluice_config "$P" "$M" > "$D/sluice-$n.toml"
    "$bin" --config "$D/sluice-$n.toml" > "$D/sluice-$n.log" 2>&1 &
    SPIDS="$SPIDS $!"
    for _ in $(seq 100); do ss -ltnH "sport = :$M" | grep -q . && break; sleep 0.1; done
    target "$bin" "$P" "$M"
done

# Shared by the bench scripts that run sluice in front of a throwaway PostgreSQL 15
# (run-pginstr.sh, run-pgab.sh, run-pgkernel.sh); sourced after scripts/common.sh.

PGBIN=/usr/lib/postgresql/15/bin

# free_port FROM: the first port from FROM on that nothing listens on.
free_port() {
    local p
    for p in $(seq "$1" $(($1 + 200))); do
        if ! ss -ltnH "sport = :$p" | grep -q .; then echo "$p"; return 0; fi
    done
    echo "error: no free port from $1" >&2; exit 1
}

# pg_throwaway DIR PORT SCALE [SERVER OPTION...]: a PostgreSQL 15 in DIR/pg (logging to
# DIR/pg.log, its socket in DIR), listening on 127.0.0.1:PORT with fsync off, SCRAM for TCP
# logins; role `app` (password `app`) with pgbench's tables at SCALE in database postgres.
# Each SERVER OPTION is passed as `-c OPTION`. The caller stops it (pg_ctl -D DIR/pg stop).
pg_throwaway() {
    local dir=$1 port=$2 scale=$3 opts="" o
    shift 3
    for o in "$@"; do opts="$opts -c $o"; done
    id postgres >/dev/null 2>&1 || { echo "error: no 'postgres' user; install postgresql-15" >&2; exit 1; }
    mkdir "$dir/pg" && chown postgres "$dir/pg" && chown postgres "$dir"
    runuser -u postgres -- "$PGBIN/initdb" -D "$dir/pg" -A trust --auth-host=scram-sha-256 >/dev/null
    # The floor (bench/src/bin/pgfloor.rs) sends no password: its own source address is trusted.
    sed -i '1i host all app 127.0.0.2/32 trust' "$dir/pg/pg_hba.conf"
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$dir/pg" -l "$dir/pg.log" -w \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off$opts" \
        start >/dev/null
    psql -qX -h "$dir" -p "$port" -U postgres -c "CREATE ROLE app LOGIN PASSWORD 'app'; GRANT CREATE ON SCHEMA public TO app" postgres >/dev/null
    PGPASSWORD=app pgbench -h 127.0.0.1 -p "$port" -U app -i -s "$scale" -q postgres >/dev/null 2>&1
}

# pg_teardown DIR: stops pg_throwaway's server in DIR and a PgBouncer whose pidfile is
# DIR/pgbouncer.pid (pgbouncer_files), then removes DIR. For a cleanup on EXIT: every step
# runs whatever the one before it returned.
pg_teardown() {
    [ -f "$1/pgbouncer.pid" ] && kill "$(cat "$1/pgbouncer.pid")" 2>/dev/null
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$1/pg" stop -m immediate >/dev/null 2>&1
    rm -rf "$1"
}

# sluice_pg_config PORT PGPORT MAX: a sluice configuration with one worker thread, listening
# on 127.0.0.1:PORT, user `app`, the server at PGPORT as writer and reader (MAX connections
# each), monitor off.
sluice_pg_config() {
    cat <<CONF
[proxy]
worker_threads = 1
[[listeners]]
listen = "127.0.0.1:$1"
protocol = "postgres"
[[users]]
name = "app"
password = "app"
[[servers]]
address = "127.0.0.1:$2"
protocol = "postgres"
hostgroup = "writer"
max_connections = $3
[[servers]]
address = "127.0.0.1:$2"
protocol = "postgres"
hostgroup = "reader"
max_connections = $3
[monitor]
enabled = false
[log]
level = "warn"
CONF
}

# sluice_and_floor: sets SLUICE (unless given: the release build, built here) and FLOOR
# (bench/src/bin/pgfloor.rs), building what is missing.
sluice_and_floor() {
    if [ -z "$SLUICE" ]; then
        apt_install build-essential pkg-config cmake ca-certificates
        ensure_rust
        cargo build --release -p sluice --bin sluice -p sluice-bench --bin pgfloor
        SLUICE="$ROOT/target/release/sluice"
    fi
    FLOOR="$ROOT/target/release/pgfloor"
    if [ ! -x "$FLOOR" ]; then
        ensure_rust
        cargo build --release -p sluice-bench --bin pgfloor
    fi
}

# pgbouncer_files DIR PGPORT PORT POOL: DIR/pgbouncer.ini, PgBouncer in transaction mode on
# 127.0.0.1:PORT in front of pg_throwaway's server at PGPORT with POOL server connections
# (its pid in DIR/pgbouncer.pid), and DIR/userlist.txt with role app's SCRAM secret from
# pg_authid (so that a login derives no key); both owned by postgres, as PgBouncer runs.
pgbouncer_files() {
    local dir=$1 pgport=$2 port=$3 pool=$4 secret
    secret=$(psql -qXAt -h "$dir" -p "$pgport" -U postgres \
        -c "SELECT rolpassword FROM pg_authid WHERE rolname = 'app'" postgres)
    printf '"app" "%s"\n' "$secret" > "$dir/userlist.txt"
    cat > "$dir/pgbouncer.ini" <<CONF
[databases]
postgres = host=127.0.0.1 port=$pgport dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = $pool
max_db_connections = $pool
log_connections = 0
log_disconnections = 0
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
CONF
    chown postgres "$dir/userlist.txt" "$dir/pgbouncer.ini"
}

#!/usr/bin/env bash
# Builds sluice in release mode and runs the PostgreSQL benchmark (bench/src/bin/pgsuite/):
# pgbench select-only and TPC-B-like, simple and prepared protocols, 1-256 clients, against one
# PostgreSQL 15 server directly, through sluice, PgBouncer, HAProxy (TCP mode) and Pgpool-II;
# connect-per-transaction with SCRAM logins; 1,000 clients through sluice on at most 50 server
# connections; idle client memory of sluice and PgBouncer. Prints markdown tables and writes
# SVG charts (docs/img/ unless --plots DIR). Arguments go to pgsuite (--time SECS, --clients
# 1,16,64,256, ...; --help lists them).
# sluice is the production build of scripts/build-pgo.sh (profile-guided, about 11 minutes
# more); `--plain` first benchmarks `cargo build --release` instead.
# Installs what it needs when missing (PostgreSQL 15 and its client with pgbench, PgBouncer,
# Pgpool-II, HAProxy, Rust; for the profile-guided build also MariaDB, sysbench and rustup's
# llvm-tools), as scripts/test.sh does.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

apt_install build-essential pkg-config cmake ca-certificates \
    postgresql-15 postgresql-client-15 pgbouncer pgpool2 haproxy
ensure_rust
cargo build --release --bin sluice -p sluice
cargo build --release -p sluice-bench --bin pgsuite --bin pgfloor
if [ "${1:-}" = --plain ]; then
    shift
else
    "$ROOT/scripts/build-pgo.sh"
    export SLUICE_BIN="$ROOT/target/pgo/use/release/sluice"
fi
exec target/release/pgsuite --plots docs/img "$@"

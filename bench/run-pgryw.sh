#!/usr/bin/env bash
# Builds sluice in release mode and measures what PostgreSQL read-your-writes costs
# (bench/src/bin/pgryw.rs): pgbench through sluice in front of a PostgreSQL 15 primary and two
# asynchronous standbys, as a user without and a user with [[users]] read_your_writes, on a
# write-then-read and a read-only script; prints tps, latency and where the reads went.
# Options: --time SECS (default 10), --clients LIST (default 1,8).
# Installs what it needs when missing (PostgreSQL 15 and its client with pgbench, Rust), as
# scripts/test.sh does.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

apt_install build-essential pkg-config cmake ca-certificates postgresql-15 postgresql-client-15
ensure_rust
cargo build --release -p sluice -p sluice-bench
exec target/release/pgryw "$@"

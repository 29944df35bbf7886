#!/usr/bin/env bash
# Builds sluice in release mode and measures PostgreSQL read scaling with replicas discovered
# at runtime (bench/src/bin/pgreadscale/): a PostgreSQL 15 primary and three streaming
# standbys, every PostgreSQL process of each server capped with a cgroup v1 CPU quota
# (--db-cpu); pgbench select-only through sluice with the primary alone, then after one, two
# and three standby addresses were written into the file sluice's [[discovery]] command prints.
# Needs root (/sys/fs/cgroup/cpu). Options: --db-cpu F --db-shares N --bench-shares N
# --threads N --time SECS --warmup SECS --scale N --balance weighted|least_outstanding.
# Installs what it needs when missing (PostgreSQL 15 and its client with pgbench, Rust), as
# scripts/test.sh does.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

apt_install build-essential pkg-config cmake ca-certificates postgresql-15 postgresql-client-15
ensure_rust
cargo build --release -p sluice -p sluice-bench
exec target/release/pgreadscale "$@"

#!/usr/bin/env bash
# Builds sluice in release mode and measures read scaling: sysbench oltp_read_only through
# sluice with the primary alone, then with one, two and three replicas added at runtime, each
# mariadbd capped with a cgroup v1 CPU quota (--db-cpu). Needs root (/sys/fs/cgroup/cpu).
# Installs what it needs when missing (MariaDB, sysbench, Rust), as scripts/test.sh does.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

apt_install build-essential pkg-config cmake ca-certificates sysbench
ensure_rust
ensure_mariadb
cargo build --release --bin sluice -p sluice
cargo run --release -q -p sluice-bench --bin readscale -- "$@"

#!/usr/bin/env bash
# Builds sluice in release mode and measures failover: time from the primary's death (SIGKILL,
# SIGSTOP) to the first write acknowledged through sluice, and what sysbench oltp_read_write
# clients see across a failover.
# Options: --reps N, --threads N, --time SECS, --semi-sync.
# Installs what it needs when missing (MariaDB, sysbench, Rust), as scripts/test.sh does.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

apt_install build-essential pkg-config cmake ca-certificates sysbench
ensure_rust
ensure_mariadb
cargo build --release --bin sluice -p sluice
cargo run --release -q -p sluice-bench --bin failover -- "$@"

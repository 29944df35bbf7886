#!/usr/bin/env bash
# Builds sluice in release mode and measures tail latency under overload: 10,000 clients with
# no think time against one small pool (queue timeout and queue limit).
# Installs what it needs when missing (MariaDB, sysbench, Rust), as scripts/test.sh does.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

apt_install build-essential pkg-config cmake ca-certificates sysbench
ensure_rust
ensure_mariadb
cargo build --release --bin sluice -p sluice
cargo run --release -q -p sluice-bench --bin overload -- "$@"

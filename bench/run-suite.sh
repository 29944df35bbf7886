#!/usr/bin/env bash
# Builds sluice in release mode and runs the benchmark suite: sysbench point select, read-only
# and read/write at 1-256 threads, directly against one MariaDB server, through sluice and
# through HAProxy (TCP mode); prints a markdown table and writes SVG charts (docs/img/ unless
# --plots DIR). --db-cpu F caps the server at F CPUs (cgroup v1, needs root).
# Installs what it needs when missing (MariaDB, sysbench, HAProxy, Rust), as scripts/test.sh does.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

apt_install build-essential pkg-config cmake ca-certificates sysbench haproxy
ensure_rust
ensure_mariadb
cargo build --release --bin sluice -p sluice
cargo run --release -q -p sluice-bench --bin suite -- "$@"

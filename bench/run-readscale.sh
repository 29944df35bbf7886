#!/usr/bin/env bash
# Builds sluice in release mode and measures read scaling: sysbench oltp_read_only through
# sluice with the primary alone, then with one, two and three replicas added at runtime, each
# mariadbd capped with a cgroup v1 CPU quota (--db-cpu). Needs root (/sys/fs/cgroup/cpu),
# mariadb-server and sysbench (apt-get install -y ...).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin sluice -p sluice
cargo run --release -q -p sluice-bench --bin readscale -- "$@"

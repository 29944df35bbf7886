#!/usr/bin/env bash
# Builds sluice in release mode and measures failover: time from the primary's death (SIGKILL,
# SIGSTOP) to the first write acknowledged through sluice, and what sysbench oltp_read_write
# clients see across a failover. Needs mariadb-server and sysbench (apt-get install -y ...).
# Options: --reps N, --threads N, --time SECS, --semi-sync.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin sluice -p sluice
cargo run --release -q -p sluice-bench --bin failover -- "$@"

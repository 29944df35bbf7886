#!/usr/bin/env bash
# Builds sluice in release mode and measures tail latency under overload: 10,000 clients with
# no think time against one small pool (queue timeout and queue limit). Needs mariadb-server
# and sysbench (apt-get install -y ...).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin sluice -p sluice
cargo run --release -q -p sluice-bench --bin overload -- "$@"

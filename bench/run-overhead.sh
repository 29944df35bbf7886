#!/usr/bin/env bash
# Builds sluice in release mode and measures its overhead against direct connections and
# HAProxy. Needs mariadb-server, sysbench and haproxy (apt-get install -y ...).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin sluice -p sluice
cargo run --release -q -p sluice-bench --bin overhead -- "$@"

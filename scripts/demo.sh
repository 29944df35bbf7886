#!/usr/bin/env bash
# One command for a fresh Debian machine: install MariaDB and Rust if missing, build sluice,
# and run `sluice demo` (a primary and two replicas with sluice in front). Ctrl-C stops it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

apt_install build-essential pkg-config cmake ca-certificates
ensure_rust
ensure_mariadb
echo "==> building sluice"
cargo build --release --bin sluice
exec ./target/release/sluice demo "$@"

#!/usr/bin/env bash
# One command for a fresh Debian machine: install MariaDB (PostgreSQL 15 with --postgres) and
# Rust if missing, build sluice, and run `sluice demo` (a primary and two replicas with sluice
# in front). Ctrl-C stops it.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

postgres=0
for a in "$@"; do
    if [ "$a" = "--postgres" ]; then postgres=1; fi
done

apt_install build-essential pkg-config cmake ca-certificates
ensure_rust
if [ "$postgres" -eq 1 ]; then
    apt_install postgresql-15
else
    ensure_mariadb
fi
echo "==> building sluice"
cargo build --release --bin sluice
exec ./target/release/sluice demo "$@"

#!/usr/bin/env bash
# One command for a fresh Debian machine: install everything the test suite needs (MariaDB,
# sysbench, language drivers, Rust), build, and run the whole test suite.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

apt_install build-essential pkg-config cmake ca-certificates python3 python3-venv python3-pip sysbench chromium fonts-dejavu-core openssl procps postgresql-15
ensure_rust
ensure_mariadb

# Python drivers, in a virtualenv under target/ (Debian's Python is externally managed).
VENV="$ROOT/target/pyenv"
if [ ! -x "$VENV/bin/python3" ]; then
    echo "==> creating Python virtualenv for driver tests"
    python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check PyMySQL cryptography mysql-connector-python prometheus-client "psycopg[binary]" asyncpg
export PATH="$VENV/bin:$PATH"

# Driver test programs (Node, Go, Java ...): each driver directory's setup.sh installs what it
# needs (packages, toolchains) idempotently.
for setup in "$ROOT"/crates/sluice/tests/drivers/*/setup.sh; do
    [ -f "$setup" ] || continue
    echo "==> driver setup: ${setup#$ROOT/}"
    bash "$setup"
done

echo "==> formatting and lint checks"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings

echo "==> running the test suite"
cargo test --workspace --no-fail-fast "$@"

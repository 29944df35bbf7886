#!/usr/bin/env bash
# Builds sluice in release mode and measures PostgreSQL failover (bench/src/bin/pgfailover.rs):
# a PostgreSQL 15 primary and two streaming standbys managed by sluice ([failover] enabled,
# defaults otherwise); one client inserts numbered rows through sluice while the primary gets
# SIGKILL or SIGSTOP; prints the time from the signal to the first write acknowledged by the
# new primary, the statements that failed, and the acknowledged rows missing on it.
# Options: --reps N (default 5), --mode async|sync|both, --death kill|stop|both.
# Installs what it needs when missing (PostgreSQL 15 and its client, Rust), as scripts/test.sh does.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

apt_install build-essential pkg-config cmake ca-certificates postgresql-15 postgresql-client-15
ensure_rust
cargo build --release -p sluice -p sluice-bench
exec target/release/pgfailover "$@"

#!/usr/bin/env bash
# Builds sluice for production with profile-guided optimisation: an instrumented build is
# trained on real servers through both protocols (bench/src/bin/pgotrain.rs: sysbench and
# MySQL logins against a MariaDB server, pgbench simple/extended/prepared, TPC-B-like and
# SCRAM connect-per-transaction against a PostgreSQL 15 server), and the release build is
# then compiled with that profile (LLVM lays the hot path out together and the rest aside).
# The result: target/pgo/use/release/sluice. About 11 minutes on a 2-core machine.
#
# The profile is made afresh by every run from the sources being built, never kept: a
# profile of other sources would leave changed code unoptimised.
# Installs what it needs when missing (MariaDB, PostgreSQL 15 with pgbench, sysbench, Rust
# and rustup's llvm-tools for llvm-profdata).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

apt_install build-essential pkg-config cmake ca-certificates sysbench \
    postgresql-15 postgresql-client-15
ensure_mariadb
ensure_rust
if ! command -v rustup >/dev/null 2>&1; then
    echo "error: a profile-guided build needs rustup (for its llvm-tools component)" >&2
    exit 1
fi
rustup component add llvm-tools >/dev/null
SYSROOT=$(rustc --print sysroot)
HOST=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA="$SYSROOT/lib/rustlib/$HOST/bin/llvm-profdata"
[ -x "$PROFDATA" ] || { echo "error: no llvm-profdata at $PROFDATA (rustup component add llvm-tools)" >&2; exit 1; }

PGO="$ROOT/target/pgo"
rm -rf "$PGO/raw" "$PGO/sluice.profdata"
mkdir -p "$PGO/raw"
echo "==> instrumented build"
RUSTFLAGS="-Cprofile-generate=$PGO/raw" cargo build --release -p sluice --bin sluice --target-dir "$PGO/gen"
cargo build --release -p sluice-bench --bin pgotrain --bin loadgen
echo "==> training"
SLUICE_BIN="$PGO/gen/release/sluice" target/release/pgotrain
ls "$PGO"/raw/*.profraw >/dev/null 2>&1 || { echo "error: the instrumented sluice wrote no profile" >&2; exit 1; }
"$PROFDATA" merge -o "$PGO/sluice.profdata" "$PGO"/raw/*.profraw
echo "==> optimised build"
RUSTFLAGS="-Cprofile-use=$PGO/sluice.profdata" cargo build --release -p sluice --bin sluice --target-dir "$PGO/use"
echo "built $PGO/use/release/sluice"

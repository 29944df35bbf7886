#!/usr/bin/env bash
# Coverage-guided fuzzing of sluice's parsers with AFL++ through cargo-afl (stable Rust).
#
#   bench/fuzz.sh [--seconds N] [TARGET...]   fuzz each target for N seconds (default 40), one
#                                             at a time, starting from fuzz/corpus/TARGET; print
#                                             executions, execs/s, corpus size, crashes and
#                                             hangs per target; exit 1 if any crashed or hung
#   bench/fuzz.sh record                      regenerate fuzz/corpus from real traffic (a
#                                             recording relay between real clients and a real
#                                             MariaDB), minimised with afl-cmin
#
# Targets: packet handshake params scanner sqlscan pgwire (default: all). Installs cargo-afl and
# builds AFL++ when they are missing. Findings are kept under target/afl/out/TARGET/default/
# (crashes/, hangs/); every crash becomes an input in fuzz/regressions/TARGET/ and a unit test
# beside the code it broke (docs/fuzzing.md).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"
ensure_rust

ALL_TARGETS=(packet handshake params scanner sqlscan pgwire)
SECONDS_PER_TARGET=40
# A huge allocation must fail, not swap: AFL++'s memory limit for the fuzzed program (MB).
MEMORY_MB=1024
# An input that takes longer than this (ms) counts as a hang.
TIMEOUT_MS=5000

MODE=run
TARGETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        record) MODE=record ;;
        --seconds) SECONDS_PER_TARGET="$2"; shift ;;
        --seconds=*) SECONDS_PER_TARGET="${1#*=}" ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) TARGETS+=("$1") ;;
    esac
    shift
done
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL_TARGETS[@]}")

# A panic aborts at once: no backtrace (symbolising one is slow, and memory-limited).
unset RUST_BACKTRACE RUST_LIB_BACKTRACE

AFL_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/afl"
BIN="$AFL_TARGET_DIR/release/sluice-fuzz"

ensure_afl() {
    if ! cargo afl --version >/dev/null 2>&1; then
        echo "==> installing cargo-afl"
        cargo install cargo-afl --locked
    fi
    # Builds AFL++ itself (once per rustc version); an existing build is kept.
    local help
    help="$(cargo afl fuzz -h 2>&1 || true)"
    if [[ "$help" != *"Required parameters"* ]]; then
        cargo afl config --build
    fi
}

build() {
    echo "==> building the fuzz binary (cargo afl build --release)"
    (cd "$ROOT/fuzz" && CARGO_TARGET_DIR="$AFL_TARGET_DIR" cargo afl build --release -q)
}

# stat FILE KEY: one value of AFL++'s fuzzer_stats.
stat() { awk -F' *: *' -v k="$2" '$1 == k { print $2 }' "$1"; }

run() {
    local failed=0
    printf '%-10s %8s %12s %10s %8s %8s %6s\n' target seconds executions execs/s corpus crashes hangs
    for t in "${TARGETS[@]}"; do
        local out="$AFL_TARGET_DIR/out/$t"
        rm -rf "$out"
        mkdir -p "$out"
        # AFL_NO_AFFINITY: the machine is shared, do not claim a core. The core_pattern check
        # is skipped because a crash here is a Rust panic (abort), not a core dump.
        AFL_NO_UI=1 AFL_NO_AFFINITY=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 \
            AFL_QUIET=1 \
            cargo afl fuzz -i "$ROOT/fuzz/corpus/$t" -o "$out" -m "$MEMORY_MB" -t "$TIMEOUT_MS" \
            -V "$SECONDS_PER_TARGET" -- "$BIN" "$t" >"$out/afl.log" 2>&1 || {
            echo "afl-fuzz failed for $t; see $out/afl.log" >&2
            tail -20 "$out/afl.log" >&2
            failed=1
            continue
        }
        local s="$out/default/fuzzer_stats"
        local crashes hangs
        crashes=$(stat "$s" saved_crashes)
        hangs=$(stat "$s" saved_hangs)
        printf '%-10s %8s %12s %10s %8s %8s %6s\n' "$t" "$(stat "$s" run_time)" \
            "$(stat "$s" execs_done)" "$(stat "$s" execs_per_sec)" "$(stat "$s" corpus_count)" \
            "$crashes" "$hangs"
        if [ "${crashes:-0}" != 0 ] || [ "${hangs:-0}" != 0 ]; then
            echo "   findings: $out/default/crashes $out/default/hangs" >&2
            failed=1
        fi
    done
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
    return $failed
}

record() {
    apt_install sysbench python3 python3-venv
    ensure_mariadb
    # The Python drivers, in the virtualenv the test suite uses (the recorder looks there).
    local venv="${CARGO_TARGET_DIR:-$ROOT/target}/pyenv"
    [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check PyMySQL mysql-connector-python
    RAW="$(mktemp -d)"
    trap 'rm -rf "$RAW"' EXIT
    local raw="$RAW"
    echo "==> recording real traffic"
    cargo build -q -p sluice-fuzzing --bin fuzz-record
    "${CARGO_TARGET_DIR:-$ROOT/target}/debug/fuzz-record" "$raw/seeds"
    echo "==> minimising with afl-cmin"
    # AFL++'s shell afl-cmin (its Python one keeps nothing of a persistent-mode Rust target).
    local afl_bin
    afl_bin="$(dirname "$( (cargo afl fuzz -h 2>&1 || true) | grep -o '/[^ ]*/afl-fuzz' | head -1)")"
    for t in "${TARGETS[@]}"; do
        if [ ! -d "$raw/seeds/$t" ]; then
            # pgwire's seeds are written by hand (the recorder speaks MySQL): kept as they are.
            echo "$t: nothing recorded, fuzz/corpus/$t kept"
            continue
        fi
        rm -rf "$raw/min-$t"
        AFL_NO_AFFINITY=1 AFL_PATH="$afl_bin" PATH="$afl_bin:$PATH" "$afl_bin/afl-cmin.bash" \
            -i "$raw/seeds/$t" -o "$raw/min-$t" -m "$MEMORY_MB" -t "$TIMEOUT_MS" \
            -- "$BIN" "$t" >"$raw/cmin-$t.log" 2>&1 || {
            tail -20 "$raw/cmin-$t.log" >&2
            exit 1
        }
        rm -rf "$ROOT/fuzz/corpus/$t"
        mkdir -p "$ROOT/fuzz/corpus/$t"
        cp "$raw/min-$t"/* "$ROOT/fuzz/corpus/$t/"
        echo "$t: $(ls "$raw/seeds/$t" | wc -l) recorded, $(ls "$ROOT/fuzz/corpus/$t" | wc -l) kept"
    done
    du -sh "$ROOT/fuzz/corpus"
}

ensure_afl
build
"$MODE"

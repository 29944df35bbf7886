# Shared by scripts/demo.sh, scripts/test.sh and bench/run-*.sh: install what is missing on Debian.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

APT_UPDATED=0
# apt_install PKG... : installs the packages that are not installed yet (one apt-get update first).
apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ "${#missing[@]}" -eq 0 ]; then return 0; fi
    echo "==> installing: ${missing[*]}"
    if [ "$APT_UPDATED" -eq 0 ] && [ "${SLUICE_APT_UPDATED:-0}" != 1 ]; then
        $SUDO apt-get update -q
        APT_UPDATED=1
        # Driver setup scripts run by test.sh reuse it instead of updating again.
        export SLUICE_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# ensure_rust: cargo on PATH (rustup's, if present), or install it.
ensure_rust() {
    if [ -d "$HOME/.cargo/bin" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
    if command -v cargo >/dev/null 2>&1; then
        # fmt and clippy gate the test command; add them if the toolchain lacks them.
        if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
            command -v rustup >/dev/null 2>&1 && rustup component add rustfmt clippy || true
        fi
        return 0
    fi
    echo "==> installing Rust (rustup)"
    apt_install curl ca-certificates build-essential
    if curl -sSf https://sh.rustup.rs | sh -s -- -y --profile default; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "error: cannot install Rust with rustup; install a recent stable Rust toolchain (https://rustup.rs)" >&2
        exit 1
    fi
}

# The MariaDB server and client binaries; the demo and the tests start their own servers.
ensure_mariadb() {
    apt_install mariadb-server mariadb-client
}

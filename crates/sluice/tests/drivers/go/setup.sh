#!/usr/bin/env bash
# Installs what the Go driver tests need on Debian (tests/driver_go.rs: go-sql-driver/mysql, the
# program in this directory; the PostgreSQL one: jackc/pgx v5, the program in pgx/): a Go
# toolchain recent enough for go.mod (the system's, or else the official toolchain fetched from
# the Go module proxy into .toolchain/) and the modules in go.sum (go mod download), then builds
# both programs once so the tests' own builds are quick. Idempotent; run as root or with sudo.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# The official toolchain's usual place, when it is not on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
fi
if [ -x "$DIR/.toolchain/bin/go" ]; then
    export PATH="$DIR/.toolchain/bin:$PATH"
fi

# go.mod's go directive is the highest minimum of its modules (1.25: pgx v5.12, golang.org/x/text).
# Debian 12's golang-go (1.19) is too old, so when no recent Go is installed, fetch the official
# toolchain from the Go module proxy (golang.org/toolchain), the same place `go` itself would
# download it from.
export GOTOOLCHAIN=local
need_full="$(sed -n 's/^go \([0-9][0-9.]*\).*/\1/p' "$DIR/go.mod")"
need="$(echo "$need_full" | cut -d. -f1,2)"
have="$(command -v go >/dev/null 2>&1 && go env GOVERSION | sed -n 's/^go\([0-9]*\.[0-9]*\).*/\1/p' || echo 0)"
if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
    command -v curl >/dev/null 2>&1 && command -v unzip >/dev/null 2>&1 || {
        [ "${SLUICE_APT_UPDATED:-0}" = 1 ] || $SUDO apt-get update -q
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q curl unzip ca-certificates
    }
    version="v0.0.1-go${need_full}.linux-$(dpkg --print-architecture)"
    echo "==> fetching the Go ${need_full} toolchain from the Go module proxy"
    tmp="$(mktemp -d)"
    curl -fsSL -o "$tmp/go.zip" "https://proxy.golang.org/golang.org/toolchain/@v/${version}.zip"
    unzip -q "$tmp/go.zip" -d "$tmp"
    rm -rf "$DIR/.toolchain"
    mv "$tmp/golang.org/toolchain@${version}" "$DIR/.toolchain"
    chmod +x "$DIR/.toolchain/bin/"* "$DIR/.toolchain/pkg/tool/"*/* 2>/dev/null || true
    rm -rf "$tmp"
    export PATH="$DIR/.toolchain/bin:$PATH"
fi

cd "$DIR"
echo "==> go mod download in ${DIR}"
go mod download
go build -o /dev/null .
go build -o /dev/null ./pgx

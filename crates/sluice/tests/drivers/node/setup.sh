#!/usr/bin/env bash
# Installs what tests/driver_node.rs needs on Debian: Node.js and npm (Debian's packages, only
# when node is missing) and the mysql2 driver pinned by package-lock.json (npm ci, only when
# node_modules does not already match it). Idempotent; run as root or with sudo.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "==> installing nodejs and npm"
    [ "${SLUICE_APT_UPDATED:-0}" = 1 ] || $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q nodejs npm
fi

cd "$DIR"
# npm ls fails when a dependency is missing or does not match package.json.
if npm ls --omit=dev >/dev/null 2>&1; then
    echo "==> node driver packages already installed ($(node -p 'require("mysql2/package.json").version' 2>/dev/null || echo '?'))"
else
    echo "==> npm ci in ${DIR}"
    npm ci --no-audit --no-fund
fi

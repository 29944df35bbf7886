#!/usr/bin/env bash
# Installs what the Node.js driver tests need on Debian: Node.js and npm (Debian's packages,
# only when node is missing) and the drivers pinned by package-lock.json — mysql2 (checks.js),
# pg and pg-copy-streams (pg_checks.js) — with npm ci, only when node_modules does not already
# match it. Idempotent; run as root or with sudo.
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
    echo "==> node driver packages already installed (mysql2 $(node -p 'require("mysql2/package.json").version' 2>/dev/null || echo '?'), pg $(node -p 'require("pg/package.json").version' 2>/dev/null || echo '?'))"
else
    echo "==> npm ci in ${DIR}"
    npm ci --no-audit --no-fund
fi

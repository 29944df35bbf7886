#!/usr/bin/env bash
# Set-up for the Java driver test (crates/sluice/tests/driver_java.rs), idempotent: installs a
# JDK and Maven if missing, fetches MariaDB Connector/J into lib/ (see pom.xml) and compiles
# Checks.java into classes/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if ! command -v javac >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    echo "==> installing default-jdk-headless maven"
    [ "${SLUICE_APT_UPDATED:-0}" = 1 ] || $SUDO apt-get update -q
    $SUDO env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends default-jdk-headless maven
fi

version="$(sed -n 's:.*<connectorj.version>\(.*\)</connectorj.version>.*:\1:p' pom.xml)"
jar="lib/mariadb-java-client-$version.jar"
if [ ! -f "$jar" ]; then
    echo "==> fetching MariaDB Connector/J $version"
    rm -rf lib classes
    mvn -B -q dependency:copy-dependencies -DoutputDirectory=lib
    [ -f "$jar" ] || { echo "error: $jar was not fetched" >&2; exit 1; }
fi

if [ ! -f classes/Checks.class ] || [ Checks.java -nt classes/Checks.class ]; then
    echo "==> compiling Checks.java"
    rm -rf classes
    mkdir -p classes
    javac -encoding UTF-8 -Xlint:all -cp "lib/*" -d classes Checks.java
fi

#!/usr/bin/env bash
# Set-up for the Java driver tests (crates/sluice/tests/driver_java.rs), idempotent: installs a
# JDK and Maven if missing, fetches MariaDB Connector/J and PgJDBC into lib/ (see pom.xml) and
# compiles Checks.java (MySQL) and PgChecks.java (PostgreSQL) into classes/.
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

prop() { sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" pom.xml; }
jars=("lib/mariadb-java-client-$(prop connectorj.version).jar" "lib/postgresql-$(prop pgjdbc.version).jar")
for jar in "${jars[@]}"; do
    if [ ! -f "$jar" ]; then
        echo "==> fetching MariaDB Connector/J and PgJDBC (see pom.xml)"
        rm -rf lib classes
        mvn -B -q dependency:copy-dependencies -DoutputDirectory=lib
        for j in "${jars[@]}"; do
            [ -f "$j" ] || { echo "error: $j was not fetched" >&2; exit 1; }
        done
        break
    fi
done

sources=(Checks.java PgChecks.java)
stale=0
for src in "${sources[@]}"; do
    class="classes/${src%.java}.class"
    if [ ! -f "$class" ] || [ "$src" -nt "$class" ]; then stale=1; fi
done
if [ "$stale" = 1 ]; then
    echo "==> compiling ${sources[*]}"
    rm -rf classes
    mkdir -p classes
    javac -encoding UTF-8 -Xlint:all -cp "lib/*" -d classes "${sources[@]}"
fi

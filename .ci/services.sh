#!/usr/bin/env bash
# Install the server binaries the Redis and PostgreSQL tests start themselves (tests/servers.py):
# redis-server + redis-cli, and PostgreSQL's initdb + pg_ctl only when the machine lacks them.
# Nothing is started here: the tests run throw-away servers on free loopback ports.
# Idempotent; needs root (CI runs as root). Usage: bash .ci/services.sh
set -euo pipefail

have_pg_binary() {
    command -v "$1" >/dev/null 2>&1 && return 0
    [ -x "/usr/local/bin/$1" ] && return 0
    compgen -G "/usr/lib/postgresql/*/bin/$1" >/dev/null
}

packages=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    packages+=(redis-server)
fi
if ! have_pg_binary initdb || ! have_pg_binary pg_ctl; then
    packages+=(postgresql)
fi

if [ "${#packages[@]}" -gt 0 ]; then
    echo "services.sh: installing ${packages[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${packages[@]}"
else
    echo "services.sh: redis-server, redis-cli, initdb and pg_ctl already installed"
fi

# PostgreSQL refuses to run as root: as root the tests run it as the 'postgres' user.
if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
fi

redis-server --version
for b in initdb pg_ctl; do
    if command -v "$b" >/dev/null 2>&1; then "$b" --version
    elif [ -x "/usr/local/bin/$b" ]; then "/usr/local/bin/$b" --version
    else "$(compgen -G "/usr/lib/postgresql/*/bin/$b" | sort -V | tail -1)" --version
    fi
done

#!/usr/bin/env bash
# Installs the PostgreSQL server binaries that the store's tests start a
# throwaway server from (internal/store/pgtest). Idempotent: does nothing when
# initdb is already there. The packaged cluster service, if it starts, is not
# used by the tests.
set -euo pipefail

if compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null; then
	echo "install-postgres: already installed"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "install-postgres: PostgreSQL is missing and this is not root; run: sudo apt-get install postgresql" >&2
	exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql
echo "install-postgres: installed $(ls -d /usr/lib/postgresql/*/bin/initdb)"

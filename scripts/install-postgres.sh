#!/usr/bin/env bash
# Installs Debian's postgresql for the Postgres journal tests
# (test/helpers/postgres.ts starts throw-away clusters with its initdb and
# pg_ctl; Debian's service cluster is stopped and left alone: tests never
# touch a Postgres they did not start). Does nothing when it is installed.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing postgresql (Debian package) for the Postgres journal tests..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
# The package starts a cluster of its own as a service; the tests do not use it.
$sudo pg_ctlcluster --force "$(ls /usr/lib/postgresql | sort -V | tail -1)" main stop 2>/dev/null || true
ls /usr/lib/postgresql/*/bin/initdb >/dev/null

#!/usr/bin/env bash
# Installs Debian's faketime (libfaketime) for the clock tests
# (test/e2e/engine-limits.test.ts steps the wall clock of the binary with
# LD_PRELOAD; it moves Date.now() and leaves performance.now() alone).
# Does nothing when it is already installed.
set -euo pipefail
if [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || command -v faketime >/dev/null 2>&1; then exit 0; fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing faketime (Debian package) for the clock tests..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq faketime >/dev/null
command -v faketime >/dev/null

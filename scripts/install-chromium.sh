#!/usr/bin/env bash
# Installs Debian's chromium (/usr/bin/chromium) for the status page's browser
# tests (test/status/browser.test.ts drives it with playwright-core). Does
# nothing when it is already installed.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing chromium (Debian package) for the browser tests..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null

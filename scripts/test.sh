#!/usr/bin/env bash
# Installs, type-checks, builds dist/atomic and runs the whole test suite.
# Ends with the plain summary line "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install-chromium.sh
bash scripts/install-agents.sh
# libfaketime for the clock-jump tests (test/recovery/clock-jump.test.ts); they skip without it.
command -v faketime >/dev/null || { s=$([ "$(id -u)" = 0 ] || echo sudo); $s apt-get update -qq && DEBIAN_FRONTEND=noninteractive $s apt-get install -y -qq faketime >/dev/null; } || echo "faketime not installed: clock-jump tests skip"
echo "type-checking..."
node_modules/.bin/tsc --noEmit -p .
node_modules/.bin/bun scripts/build.ts
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
# Test files run one after another (each file's tests may run concurrently inside it);
# spawned binaries and SQLite fsyncs make parallel files flaky on 2 cores.
node_modules/.bin/bun test --timeout 120000 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
passed=$(grep -Eo '^ *[0-9]+ pass$' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
failed=$(grep -Eo '^ *[0-9]+ fail$' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
echo "${passed} passed, ${failed} failed"
if [ "$status" -ne 0 ] || [ "$passed" -eq 0 ]; then exit 1; fi

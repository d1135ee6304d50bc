#!/usr/bin/env bash
# Installs, type-checks, builds dist/atomic and runs the whole test suite.
# Ends with the plain summary line "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/install-chromium.sh
bash scripts/install-agents.sh
bash scripts/install-faketime.sh
bash scripts/install-bubblewrap.sh
bash scripts/install-postgres.sh
bash scripts/install-shells.sh
echo "type-checking..."
node_modules/.bin/tsc --noEmit -p .
node_modules/.bin/bun scripts/build.ts
log=$(mktemp)
failures=$(mktemp)
# One throw-away Postgres cluster for the whole suite (test/helpers/postgres.ts); the tests reuse it through
# ATOMIC_TEST_POSTGRES_URL, each file in databases of its own. Stopped and removed at exit, whatever happened.
pg_dir=""
cleanup() {
  rm -f "$log" "$failures" "$failures.context"
  if [ -n "$pg_dir" ]; then node_modules/.bin/bun test/helpers/postgres.ts stop "$pg_dir" || true; fi
}
trap cleanup EXIT
# CI keeps only the tail of the output: each pass's failing tests (named with its journal) and what they printed
# last (from above bun's own "N tests failed:" summary, so each shows once) are printed again at the end.
keep_failures() {
  grep -E '^\(fail\)' "$log" | sed "s/^/$1: /" >>"$failures" || true
  sed -E '/^[0-9]+ tests? failed:$/,$d' "$log" | grep -B 25 -E '^\(fail\)' | head -80 >>"$failures.context" || true
}
read -r pg_url pg_dir < <(node_modules/.bin/bun test/helpers/postgres.ts start $$)
export ATOMIC_TEST_POSTGRES_URL="$pg_url"
set +e
# Test files run one after another (each file's tests may run concurrently inside it);
# spawned binaries and SQLite fsyncs make parallel files flaky on 2 cores.
node_modules/.bin/bun test --timeout 120000 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
keep_failures "default journal"
passed=$(grep -Eo '^ *[0-9]+ pass$' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
failed=$(grep -Eo '^ *[0-9]+ fail$' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)
# The whole suite (no arguments): the crash, double-resume, golden-journal, pool-crash, pool, intercom, service
# (recovery, schedules, retention, the service lease) and fork/rerun tests again, on the Postgres journal (every home a schema in the suite's cluster: test/helpers/postgres.ts); pool
# tests of SQLite's write lock or of workers started before their claim commits skip themselves there.
if [ "$#" -eq 0 ]; then
  echo "the same recovery, golden, pool, intercom, service and fork tests on the Postgres journal..."
  ATOMIC_TEST_JOURNAL=postgres node_modules/.bin/bun test --timeout 120000 \
    test/recovery/crash.test.ts test/recovery/double-resume.test.ts test/recovery/pool-crash.test.ts \
    test/golden/golden.test.ts test/pool/ test/intercom/ test/service/ test/e2e/fork-rerun.test.ts 2>&1 | tee "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  keep_failures "postgres journal"
  passed=$((passed + $(grep -Eo '^ *[0-9]+ pass$' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)))
  failed=$((failed + $(grep -Eo '^ *[0-9]+ fail$' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)))
fi
set -e
if [ -s "$failures" ]; then
  echo "what the failing tests printed last (at most 80 lines a pass):"
  cat "$failures.context"
  echo "failing tests:"
  sort -u "$failures"
fi
echo "${passed} passed, ${failed} failed"
if [ "$status" -ne 0 ] || [ "$passed" -eq 0 ]; then exit 1; fi

#!/usr/bin/env bash
# Installs, type-checks, builds dist/atomic and runs the whole test suite.
# Ends with the plain summary line "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
lane_log=$(mktemp)
pg_log=$(mktemp)
lane_status=$(mktemp)
main_b_log=$(mktemp)
main_b_status=$(mktemp)
pg_status=$(mktemp)
pg_b_log=$(mktemp)
pg_b_status=$(mktemp)
tsc_log=$(mktemp)
failures=$(mktemp)
agents_log=$(mktemp)
agents_pid=""
lane_pid=""
main_b_pid=""
tsc_pid=""
# The heavy tests' slots (test/helpers/heavy.ts), shared by every bun test process below: the machine's cores bound
# the real agent CLIs and clusters they start together, not each process's own.
heavy_dir=$(mktemp -d)
export ATOMIC_TEST_HEAVY_SLOTS_DIR="$heavy_dir"
# One throw-away Postgres cluster for the whole suite (test/helpers/postgres.ts); the tests reuse it through
# ATOMIC_TEST_POSTGRES_URL, each file in databases of its own. Stopped and removed at exit, whatever happened.
pg_dir=""
cleanup() {
  for pid in "$agents_pid" "$lane_pid" "$main_b_pid" "$tsc_pid"; do
    if [ -n "$pid" ]; then pkill -P "$pid" 2>/dev/null || true; kill "$pid" 2>/dev/null || true; fi
  done
  rm -f "$log" "$lane_log" "$pg_log" "$lane_status" "$main_b_log" "$main_b_status" "$pg_status" "$pg_b_log" "$pg_b_status" "$tsc_log" "$failures" "$failures.context" "$agents_log"
  rm -rf "$heavy_dir"
  if [ -n "$pg_dir" ]; then node_modules/.bin/bun test/helpers/postgres.ts stop "$pg_dir" || true; fi
}
trap cleanup EXIT
# The agent CLIs (30-60 s of downloads on a fresh machine, into test/agents alone) install in the background
# while the project's own dependencies install and it is type-checked and built; the tests that drive them wait.
bash scripts/install-agents.sh >"$agents_log" 2>&1 &
agents_pid=$!
bash scripts/setup.sh
bash scripts/install-chromium.sh
bash scripts/install-faketime.sh
bash scripts/install-bubblewrap.sh
bash scripts/install-postgres.sh
bash scripts/install-shells.sh
# The type check runs beside the build (6 and 11 s of a quiet 2-core machine); then the suite's cluster starts.
echo "type-checking..."
node_modules/.bin/tsc --noEmit -p . >"$tsc_log" 2>&1 &
tsc_pid=$!
node_modules/.bin/bun scripts/build.ts
tsc_status=0
wait "$tsc_pid" || tsc_status=$?
tsc_pid=""
cat "$tsc_log"
if [ "$tsc_status" -ne 0 ]; then exit 1; fi
read -r pg_url pg_dir < <(node_modules/.bin/bun test/helpers/postgres.ts start $$)
export ATOMIC_TEST_POSTGRES_URL="$pg_url"
# CI keeps only the tail of the output: each pass's failing tests (named with its journal) and what they printed
# last (from above bun's own "N tests failed:" summary, so each shows once) are printed again at the end.
# keep_failures PASS-NAME LOG; count LOG adds that log's pass and fail counts to the totals.
keep_failures() {
  grep -E '^\(fail\)' "$2" | sed "s/^/$1: /" >>"$failures" || true
  sed -E '/^[0-9]+ tests? failed:$/,$d' "$2" | grep -B 25 -E '^\(fail\)' | head -80 >>"$failures.context" || true
}
passed=0
failed=0
# Each pass writes bun's JUnit report (every file's and every test's wall time) to test-artifacts/times/; the end of
# the run prints each pass's slowest files from them (scripts/test-times.ts), the figures the lanes are balanced by.
times=test-artifacts/times
rm -rf "$times"
mkdir -p "$times"
junit() { echo "--reporter=junit" "--reporter-outfile=$times/$1.xml"; }
count() {
  passed=$((passed + $(grep -Eo '^ *[0-9]+ pass$' "$1" | tail -1 | grep -Eo '[0-9]+' || echo 0)))
  failed=$((failed + $(grep -Eo '^ *[0-9]+ fail$' "$1" | tail -1 | grep -Eo '[0-9]+' || echo 0)))
}
# In a bun test process, test files run one after another (each file's tests may run concurrently inside it):
# spawned binaries and SQLite fsyncs made files run all in parallel flaky on 2 cores. The whole suite (no
# arguments) runs three such processes at once (docs/design/testing.md "The project's suite: lanes"):
# - the second lane: the files named in `lane` mostly wait (leases, deadlines, gates, a database stopped and
#   started, hosts killed and reclaimed; their measured CPU over wall time, and the rule for moving a file here:
#   the design file), then the Postgres pass below. It starts as soon as the binary and the cluster are there
#   (they need no agent CLI). None starts an agent CLI or a browser (fleet/workers.test.ts drives Chromium: it
#   stays in the main lane, as does any file not named here).
# - the main lane, every other file, once the agent CLIs are installed, in two processes: the files under
#   `main_b` in one, all the rest in the other. In one process it left a core idle for its last ~8 minutes,
#   after the second lane had ended (1,517 s against 1,045 at b826d74). Each half has its share of the real
#   agent CLIs (runners/ in one, builtins/ in the other); the heavy tests' bound holds across both through the
#   shared slot folder above (test/helpers/heavy.ts). observability/ (binaries and their receivers, no browser,
#   no agent CLI) joined main_b when the other process was the longest chain (docs/design/testing.md).
lane=(test/fleet/host-crash.test.ts test/fleet/hosts.test.ts test/fleet/harness.test.ts test/fleet/network.test.ts test/fleet/fleet-recovery.test.ts
  test/conformance/ test/recovery/postgres-outage.test.ts test/recovery/postgres-faults.test.ts
  test/service/schedule-cli.test.ts test/e2e/durations.test.ts test/recovery/clock-jump.test.ts
  test/pool/work-lease-deadline.test.ts test/engine/sleep-exit.test.ts test/e2e/start-timeouts.test.ts test/recovery/sleep-clocks.test.ts
  test/fleet/host-outage.test.ts test/fleet/host-outage-points.test.ts test/fleet/host-outage-random.test.ts test/fleet/service-host-outage.test.ts test/fleet/remote-worktree.test.ts test/fleet/budget.test.ts
  test/service/clock-skew.test.ts test/fleet/attach-host.test.ts test/pool/busy-journal.test.ts test/engine/cancel.test.ts)
lane_ignored=("${lane[@]/%\//\/**}")
# real-cli-pi (about 100 s) is here rather than with the other builtins: with it the two processes of the main lane end
# together (docs/design/testing.md, session 13).
main_b=(test/runners/ test/e2e/ test/observability/ test/builtins/real-cli-pi.test.ts)
main_b_ignored=("${main_b[@]/%\//\/**}")
# The whole suite (no arguments) also runs the crash, double-resume, clock-jump, golden-journal, pool-crash, pool, intercom,
# service (recovery, schedules, retention, the service lease) and fork/rerun tests again, on the Postgres journal
# (every home a schema in the suite's cluster: test/helpers/postgres.ts); pool tests of SQLite's write lock skip
# themselves there. Files in those folders that never open a journal (the intercom broker and its framing and
# addresses; the pool's message parsing, state table, output batching, root channel and lease-deadline rule, in this process)
# or open a SQLite one of their own whatever the pass (the scheduler's decisions) ran on the first pass and would
# run the same again: they are left out of this one.
# This Postgres pass runs in the process chains beside the main lane's files, in two parts (pg_b below); it
# starts no agent CLI and no browser: the pass's files that drive one (they import the browser or agent helpers:
# the service's status-page tests) run on the Postgres journal after the main lane, by themselves.
pg_files=(test/recovery/crash.test.ts test/recovery/double-resume.test.ts test/recovery/pool-crash.test.ts test/recovery/clock-jump.test.ts
  test/golden/golden.test.ts test/pool/ test/intercom/ test/service/ test/e2e/fork-rerun.test.ts)
mapfile -t pg_heavy < <(grep -rlE 'browser-support|helpers/agents|helpers/heavy' --include='*.test.ts' "${pg_files[@]}" | sort)
journal_free=(
  test/intercom/broker.test.ts test/intercom/framing.test.ts test/intercom/addresses.test.ts
  test/pool/parse-message.test.ts test/pool/pool-executor-state.test.ts test/pool/event-batcher.test.ts
  test/pool/root-channel.test.ts test/pool/pool-executor.test.ts test/pool/lease-deadline-rule.test.ts test/pool/stall-monitor.test.ts
  test/service/scheduler.test.ts test/service/commit-watch.test.ts
)
# The Postgres pass runs in two parts, for balance (docs/design/testing.md): the single files of `pg_b` (the crash,
# double-resume, golden and fork tests) after the main lane's files of `main_b`, in that process's chain; the
# folders and clock-jump in the second lane's chain, after its files.
pg_b=(test/recovery/crash.test.ts test/recovery/double-resume.test.ts test/recovery/pool-crash.test.ts
  test/golden/golden.test.ts test/e2e/fork-rerun.test.ts)
# pg_pass JUNIT-NAME LOG STATUS-FILE ARGS...: a part of the Postgres pass; its exit status goes to STATUS-FILE.
# (set -e holds in the chains too: a failing pass must not end its chain, so each status is caught.)
pg_pass() {
  local name=$1 out=$2 status_file=$3 s=0
  shift 3
  ATOMIC_TEST_JOURNAL=postgres node_modules/.bin/bun test --timeout 120000 $(junit "$name") \
    "${journal_free[@]/#/--path-ignore-patterns=}" "${pg_heavy[@]/#/--path-ignore-patterns=}" "$@" >"$out" 2>&1 || s=$?
  echo "$s" >"$status_file"
}
# second_lane: the waiting files, then its part of the Postgres pass; each one's exit status goes to a file of its own.
second_lane() {
  local s=0
  node_modules/.bin/bun test --timeout 120000 $(junit lane) "${lane[@]}" >"$lane_log" 2>&1 || s=$?
  echo "$s" >"$lane_status"
  pg_pass postgres "$pg_log" "$pg_status" "${pg_b[@]/#/--path-ignore-patterns=}" "${pg_files[@]}"
}
if [ "$#" -eq 0 ]; then
  second_lane &
  lane_pid=$!
fi
agents_status=0
wait "$agents_pid" || agents_status=$?
agents_pid=""
cat "$agents_log"
if [ "$agents_status" -ne 0 ]; then
  echo "installing the agent CLIs failed (exit $agents_status): bash scripts/install-agents.sh" >&2
  exit 1
fi
set +e
if [ "$#" -eq 0 ]; then
  # The main lane's second process (main_b), beside its first, then the Postgres pass's part `pg_b`; each one's
  # exit status goes to a file.
  (
    s=0
    node_modules/.bin/bun test --timeout 120000 $(junit main-b) "${lane_ignored[@]/#/--path-ignore-patterns=}" \
      "${main_b[@]}" >"$main_b_log" 2>&1 || s=$?
    echo "$s" >"$main_b_status"
    pg_pass postgres-b "$pg_b_log" "$pg_b_status" "${pg_b[@]}"
  ) &
  main_b_pid=$!
  node_modules/.bin/bun test --timeout 120000 $(junit main) "${lane_ignored[@]/#/--path-ignore-patterns=}" \
    "${main_b_ignored[@]/#/--path-ignore-patterns=}" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  echo "waiting for the main lane's other process, the second lane and the Postgres pass, which ran beside it..."
  wait "$main_b_pid"
  main_b_pid=""
  wait "$lane_pid"
  lane_pid=""
  echo "the main lane's other process (${main_b[*]}, run beside the others):"
  cat "$main_b_log"
  echo "after it, on the Postgres journal: ${pg_b[*]}"
  cat "$pg_b_log"
  echo "the second lane (fleet, conformance, Postgres-outage and other waiting files, run beside the others):"
  cat "$lane_log"
  echo "the same recovery, golden, pool, intercom, service and fork tests on the Postgres journal (run beside the others):"
  cat "$pg_log"
  [ "$(cat "$main_b_status")" = 0 ] || status=1
  [ "$(cat "$lane_status")" = 0 ] || status=1
  [ "$(cat "$pg_status")" = 0 ] || status=1
  [ "$(cat "$pg_b_status")" = 0 ] || status=1
  keep_failures "default journal" "$log"
  keep_failures "default journal" "$main_b_log"
  keep_failures "default journal" "$lane_log"
  keep_failures "postgres journal" "$pg_log"
  keep_failures "postgres journal" "$pg_b_log"
  count "$log"
  count "$main_b_log"
  count "$lane_log"
  count "$pg_log"
  count "$pg_b_log"
  if [ "${#pg_heavy[@]}" -gt 0 ]; then
    echo "the Postgres pass's browser tests, after the main lane:"
    ATOMIC_TEST_JOURNAL=postgres node_modules/.bin/bun test --timeout 120000 $(junit postgres-browser) "${pg_heavy[@]}" 2>&1 | tee "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    keep_failures "postgres journal" "$log"
    count "$log"
  fi
else
  node_modules/.bin/bun test --timeout 120000 $(junit main) "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  keep_failures "default journal" "$log"
  count "$log"
fi
set -e
echo "each test file's wall time (all of them, and every test's: $times/*.xml):"
node_modules/.bin/bun scripts/test-times.ts "$times"/*.xml || true
if [ -s "$failures" ]; then
  echo "what the failing tests printed last (at most 80 lines a pass):"
  cat "$failures.context"
  echo "failing tests:"
  sort -u "$failures"
fi
echo "${passed} passed, ${failed} failed"
if [ "$status" -ne 0 ] || [ "$passed" -eq 0 ]; then exit 1; fi

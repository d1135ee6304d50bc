#!/usr/bin/env bash
# The main job, end to end on the embedded SQLite journal:
# builds dist/atomic, runs an example workflow, then shows durability by
# killing a run with SIGKILL half-way and resuming it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
node_modules/.bin/bun scripts/build.ts
export ATOMIC_HOME="${ATOMIC_HOME:-$PWD/.atomic-demo}"
export NO_COLOR="${NO_COLOR:-}"
atomic=dist/atomic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo
echo "== 1. run examples/review.ts (journal: $ATOMIC_HOME/atomic.db)"
$atomic run examples/review.ts --input dir=src --input depth=2
review=$($atomic runs --json --limit 1 | head -1 | sed -E 's/.*"id":"([^"]+)".*/\1/')

echo
echo "== 2. durability: start examples/durable-count.ts, kill -9 it half-way, resume it"
$atomic run examples/durable-count.ts --input out="$work/effects.txt" --quiet &
pid=$!
lines() { if [ -f "$work/effects.txt" ]; then wc -l < "$work/effects.txt"; else echo 0; fi; }
while [ "$(lines)" -lt 20 ]; do sleep 0.05; done
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
count=$($atomic runs --json --limit 1 | head -1 | sed -E 's/.*"id":"([^"]+)".*/\1/')
echo "killed run $count after $(wc -l < "$work/effects.txt") side effects:"
$atomic runs --limit 2
$atomic resume "$count"
echo "side effects: $(wc -l < "$work/effects.txt") lines for 40 steps ($(sort "$work/effects.txt" | uniq -d | wc -l) step(s) repeated: at most the one in flight at the kill)"

echo
echo "Inspect the runs:"
echo "  ATOMIC_HOME=$ATOMIC_HOME $atomic show $review"
echo "  ATOMIC_HOME=$ATOMIC_HOME $atomic logs $review --stage list"
echo "  ATOMIC_HOME=$ATOMIC_HOME $atomic show $count"

/**
 * A separate process for the two-process journal test
 * (test/conformance/two-processes.test.ts).
 *
 *   bun append-worker.ts <home> <ownRootId> <contestedRootId> <count>
 *
 * The journal is the home's, or the one ATOMIC_JOURNAL names (a Postgres URL).
 *
 * Protocol, one JSON object per stdout line: prints {type:"ready"} once the
 * journal is open; on the stdin line "go" it races for the contested lease,
 * then appends <count> entries to its own root run, one transaction each
 * (the first creates the run), and prints {type:"done", ...}. It holds its
 * leases until the stdin line "exit" (or stdin closes), so the contested
 * lease stays held by a live process while the other worker tries it.
 */

import { openJournal } from "../../src/journal/open.ts";
import type { AppendEntry } from "../../src/journal/append.ts";
import { LeaseHeldError, errorInfo } from "../../src/shared/errors.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";

const [home, ownRoot, contestedRoot, countText] = process.argv.slice(2) as [string, RunId, RunId, string];
const count = Number(countText);

function say(message: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

const lines = console[Symbol.asyncIterator]();
async function waitFor(word: string): Promise<void> {
  for (;;) {
    const { value, done } = await lines.next();
    if (done || value.trim() === word) return;
  }
}

const journal = await openJournal({ home, durability: "full", ...(process.env.ATOMIC_JOURNAL ? { journalUrl: process.env.ATOMIC_JOURNAL } : {}) });
const holder = thisProcessHolder("worker");
say({ type: "ready" });
await waitFor("go");

let contested: "won" | "held" | "error" = "error";
let heldBy: string | undefined;
const errors: unknown[] = [];
try {
  await journal.acquireLease(contestedRoot, holder, { timeoutMs: 60_000 });
  contested = "won";
} catch (err) {
  if (err instanceof LeaseHeldError) {
    contested = "held";
    heldBy = err.holder.holderId;
  } else errors.push(errorInfo(err));
}

let appended = 0;
try {
  const lease = await journal.acquireLease(ownRoot, holder, { timeoutMs: 60_000 });
  for (let i = 1; i <= count; i++) {
    const entry: AppendEntry =
      i === 1
        ? {
            runId: ownRoot,
            type: "run_started",
            payload: { i },
            newRun: {
              rootId: ownRoot,
              parentId: null,
              parentKey: null,
              depth: 0,
              workflowName: "two-processes",
              workflowPath: import.meta.path,
              workflowDigest: "test",
              inputs: {},
            },
          }
        : { runId: ownRoot, type: "checkpoint", key: `step-${i}`, payload: { i } };
    try {
      const [outcome] = await journal.append(lease, [entry]);
      if (outcome?.status === "appended") appended++;
      else errors.push(outcome);
    } catch (err) {
      errors.push(errorInfo(err));
    }
  }
} catch (err) {
  errors.push(errorInfo(err));
}

say({ type: "done", holderId: holder.holderId, contested, heldBy, appended, errors });
await waitFor("exit");
await journal.close();

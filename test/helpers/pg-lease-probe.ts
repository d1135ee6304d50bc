/**
 * A separate process that tries to take one lease on the journal
 * ATOMIC_JOURNAL names, for the Postgres tests that run it under another
 * clock (libfaketime) or on another "host" (ATOMIC_HOST_ID):
 *
 *   bun pg-lease-probe.ts <home> <rootId> <timeoutMs>
 *
 * Prints one JSON line: {taken: true, epoch} or {taken: false, code, message}.
 */

import { openJournal } from "../../src/journal/open.ts";
import { AtomicError } from "../../src/shared/errors.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";

const [home, rootId, timeoutText] = process.argv.slice(2) as [string, RunId, string];
const journal = await openJournal({ home, durability: "full", journalUrl: process.env.ATOMIC_JOURNAL ?? "" });
try {
  const lease = await journal.acquireLease(rootId, thisProcessHolder("probe"), { timeoutMs: Number(timeoutText) });
  process.stdout.write(`${JSON.stringify({ taken: true, epoch: lease.epoch, now: Date.now() })}\n`);
} catch (err) {
  const e = err as AtomicError;
  process.stdout.write(`${JSON.stringify({ taken: false, code: e instanceof AtomicError ? e.code : "error", message: e.message, now: Date.now() })}\n`);
} finally {
  await journal.close();
}

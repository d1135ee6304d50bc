/**
 * A separate process for the Postgres work queue's and message store's
 * race tests (test/conformance/pg-work-queue.test.ts) and the claim bench
 * (bench/pg-claims.ts): it opens the journal at a URL on a connection pool
 * of its own, so its statements race the other processes' on the server.
 *
 *   bun pg-race-worker.ts <journal url> <mode> <json args> [home]
 *
 * With `home`, the journal's home is that directory, made and removed by the
 * caller; without it the worker makes one in the temp directory and removes
 * it on its way out.
 *
 * Protocol, one JSON object per stdout line: {type:"ready"} once the
 * journal is open; on the stdin line "go" it runs its mode and prints
 * {type:"done", ...} (or {type:"error", message}), then exits.
 *
 * Modes:
 * - drain {rootId, epoch, workers, leaseMs}: each worker claims and
 *   commits (completeAndClaim, as the pool's dispatcher does) until nothing
 *   is ready; prints every id it claimed.
 * - renew {fences, leaseMs}: renews the fences in a loop until every one is
 *   stale; prints, per fence, the outcomes in order (true: still held).
 * - take {fences, leaseMs}: for each fence, releases it (as the coordinator
 *   does with a lost worker's item) and leases the item again to a new
 *   worker, then renews that lease once; prints the new items.
 * - claim {rootId, epoch, worker, leaseMs}: claims (without committing)
 *   until the root's lease moved past `epoch` and a claim came back empty;
 *   prints every id it claimed.
 * - send {rootId, path, ids}: enqueues a message per id for the next stage
 *   of `path`; prints how many were queued and the codes of the refusals.
 * - raw {count}: the bench's baseline from the same kind of process: `count`
 *   single-row autocommit INSERTs into public.raw_events, one connection.
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { openJournal } from "../../src/journal/open.ts";
import type { WorkFence, WorkItem } from "../../src/journal/work-queue.ts";
import { errorInfo } from "../../src/shared/errors.ts";
import type { RunId } from "../../src/shared/ids.ts";

const [url, mode, argsText, givenHome] = process.argv.slice(2) as [string, string, string, string | undefined];
const args = JSON.parse(argsText) as Record<string, unknown>;

function say(message: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

// A home the caller made (and removes, also when it kills this process), or one of its own.
const home = givenHome ?? mkdtempSync(join(tmpdir(), "atomic-pg-race-worker-"));
const journal = await openJournal({ home, durability: "normal", journalUrl: url });
const lines = console[Symbol.asyncIterator]();
say({ type: "ready" });
for (;;) {
  const { value, done } = await lines.next();
  if (done || value.trim() === "go") break;
}

const fenceOf = (w: WorkItem): WorkFence => ({ id: w.id, workerId: w.workerId!, generation: w.generation, epoch: w.epoch });
const LOST = { name: "WorkerLost", code: "worker_lost", message: "the worker was lost" };

try {
  const leaseMs = Number(args.leaseMs ?? 30_000);
  if (mode === "drain") {
    const root = { rootId: args.rootId as RunId, epoch: Number(args.epoch) };
    const workers = args.workers as string[];
    const claimed: string[] = [];
    const run = async (first: WorkItem): Promise<void> => {
      for (let item: WorkItem | undefined = first; item; ) {
        claimed.push(item.id);
        const op = { id: `op-${item.id}-${item.workerId}-${item.epoch}`, digest: "d" };
        const { receipt, next } = await journal.work.completeAndClaim(fenceOf(item), { state: "completed", result: { by: item.workerId } }, op, { leaseMs, root });
        if (receipt.status !== "committed") throw new Error(`commit of ${item.id} was ${receipt.status}`);
        item = next;
      }
    };
    for (;;) {
      const items = await journal.work.claimMany(workers, leaseMs, root);
      if (items.length === 0) break;
      await Promise.all(items.map(run));
    }
    say({ type: "done", claimed });
  } else if (mode === "renew") {
    const fences = args.fences as WorkFence[];
    const outcomes: boolean[][] = fences.map(() => []);
    // Bounded, so a renewal that never sees its fence go stale (a broken fence) ends the test rather than hangs it.
    for (let live = fences.length, round = 0; live > 0 && round < 5_000; round++) {
      const stale = new Set((await journal.work.renew(fences, leaseMs)).map((f) => f.id));
      live = 0;
      fences.forEach((f, i) => {
        outcomes[i]!.push(!stale.has(f.id));
        if (!stale.has(f.id)) live++;
      });
    }
    say({ type: "done", outcomes });
  } else if (mode === "take") {
    const fences = args.fences as WorkFence[];
    const taken: WorkItem[] = [];
    for (const [i, f] of fences.entries()) {
      const released = await journal.work.release(f, 3, LOST);
      if (released.status !== "committed") throw new Error(`release of ${f.id} was ${released.status}`);
      const item = await journal.work.claimItem(f.id, `new-${i}`, leaseMs);
      if (!item) throw new Error(`${f.id} was not ready after its release`);
      if ((await journal.work.renew([fenceOf(item)], leaseMs)).length > 0) throw new Error(`the new lease of ${f.id} did not hold`);
      taken.push((await journal.work.get(f.id))!);
    }
    say({ type: "done", taken });
  } else if (mode === "claim") {
    const root = { rootId: args.rootId as RunId, epoch: Number(args.epoch) };
    const claimed: string[] = [];
    for (;;) {
      const moved = (await journal.getLease(root.rootId))?.epoch !== root.epoch;
      const item = await journal.work.claim(String(args.worker), leaseMs, root);
      if (item) claimed.push(item.id);
      else if (moved) break;
      else await Bun.sleep(1);
    }
    say({ type: "done", claimed });
  } else if (mode === "send") {
    const rootId = args.rootId as RunId;
    const path = String(args.path);
    let queued = 0;
    const refused: string[] = [];
    for (const id of args.ids as string[]) {
      const message = { rootId, id, target: path, text: `text of ${id}`, mode: "steer" as const, sticky: false, sender: "race", lookup: { paths: [path] } };
      try {
        await journal.messages.enqueue(message, () => [{ stagePath: path }]);
        queued++;
      } catch (err) {
        refused.push(errorInfo(err).code);
      }
    }
    say({ type: "done", queued, refused });
  } else if (mode === "raw") {
    const server = new URL(url);
    server.search = "";
    const client = new pg.Client({ connectionString: server.toString() });
    await client.connect();
    try {
      for (let i = 0; i < Number(args.count); i++) {
        await client.query({ name: "raw", text: "insert into public.raw_events (payload, at) values ($1, $2)", values: ['{"kind":"tool"}', Date.now()] });
      }
    } finally {
      await client.end();
    }
    say({ type: "done" });
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
} catch (err) {
  say({ type: "error", message: errorInfo(err).message });
} finally {
  await journal.close();
  if (!givenHome) rmSync(home, { recursive: true, force: true });
}

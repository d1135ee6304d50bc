/**
 * The work queue contract (WorkQueue in src/journal/work-queue.ts) on every
 * backend: items enqueued with their stage's start record, FIFO claims
 * (one at a time, for several workers at once, and together with a
 * worker's commit), fenced renewals, commits and releases (a replaced
 * worker — older generation or epoch — changes nothing), operation-id
 * idempotency and conflicts, the generation limit, and abandoning a root's
 * items. Real databases in temp directories; no timing asserted.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import type { Journal } from "../../src/journal/journal.ts";
import type { Lease } from "../../src/journal/runs.ts";
import type { ClaimScope, WorkFence, WorkItem } from "../../src/journal/work-queue.ts";
import { LATEST_SCHEMA_VERSION } from "../../src/journal/sqlite/schema-version.ts";
import { MIGRATIONS } from "../../src/journal/sqlite/migrations.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { BACKENDS, insertOldRoot, liveHolder, sqlite, sqliteAtVersion, startRoot } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

const LEASE_MS = 30_000;
const WORKER_LOST = { name: "WorkerRetryLimit", code: "worker_retry_limit", message: "lost its worker too often" };

function fence(item: WorkItem, workerId = item.workerId!): WorkFence {
  return { id: item.id, workerId, generation: item.generation, epoch: item.epoch };
}

const done = (text: string) => ({ state: "completed" as const, result: { status: "completed", text } });

for (const backend of BACKENDS) {
  describe(backend.name, () => {
    /** A fresh journal with a started root run under a live lease. */
    /** A fresh journal with a started root run under a live lease; `root` scopes claims to that drive. */
    async function setup(): Promise<{ journal: Journal; rootId: RunId; lease: Lease; root: ClaimScope }> {
      const journal = await backend.open(makeTempDir());
      open.push(journal);
      const { rootId, lease } = await startRoot(journal, "wq");
      return { journal, rootId, lease, root: { rootId, epoch: lease.epoch } };
    }

    /** Enqueues one item per id, each in its own append (so each is ready later than the one before). */
    async function enqueue(journal: Journal, lease: Lease, rootId: RunId, ids: string[], at0 = Date.now()): Promise<void> {
      for (const [i, id] of ids.entries()) {
        await journal.append(lease, [
          {
            runId: rootId,
            type: "step_started",
            key: `k-${id}`,
            payload: { id },
            durable: false,
            at: at0 + i,
            work: { id, stageKey: `k-${id}`, attempt: 1, descriptor: { command: `echo ${id}` } },
          },
        ]);
      }
    }

    test(`${backend.name}: an item is enqueued with its start record and claimed FIFO by readiness`, async () => {
      const { journal, rootId, lease, root } = await setup();
      // Enqueued in this order, but ready in another: claims follow readiness.
      const now = Date.now();
      await enqueue(journal, lease, rootId, ["w-b"], now + 2);
      await enqueue(journal, lease, rootId, ["w-a"], now + 1);
      await enqueue(journal, lease, rootId, ["w-c"], now + 3);
      expect(await journal.work.count("ready")).toBe(3);
      const queued = await journal.work.get("w-a");
      expect(queued).toMatchObject({ id: "w-a", rootId, runId: rootId, stageKey: "k-w-a", attempt: 1, state: "ready", generation: 1, workerId: null, leaseExpiresAt: null });
      expect(queued!.descriptor).toEqual({ command: "echo w-a" });

      const before = Date.now();
      const first = await journal.work.claim("worker-1", LEASE_MS, root);
      expect(first).toMatchObject({ id: "w-a", state: "leased", workerId: "worker-1", generation: 1, epoch: queued!.epoch + 1 });
      expect(first!.leaseExpiresAt).toBeGreaterThanOrEqual(before + LEASE_MS);
      expect(first!.leaseExpiresAt).toBeLessThanOrEqual(Date.now() + LEASE_MS);
      expect((await journal.work.claim("worker-2", LEASE_MS, root))?.id).toBe("w-b");
      expect((await journal.work.claim("worker-3", LEASE_MS))?.id).toBe("w-c");
      expect(await journal.work.claim("worker-4", LEASE_MS, root)).toBeUndefined();
      expect(await journal.work.count("leased")).toBe(3);
      expect((await journal.work.list(rootId)).map((w) => w.state)).toEqual(["leased", "leased", "leased"]);
    });

    test(`${backend.name}: a claim for one root leaves another root's items alone`, async () => {
      const { journal, rootId, lease, root } = await setup();
      const other = await startRoot(journal, "wq");
      const now = Date.now();
      await enqueue(journal, other.lease, other.rootId, ["o-1"], now);
      await enqueue(journal, lease, rootId, ["r-1"], now + 1);
      expect((await journal.work.claim("worker-1", LEASE_MS, root))?.id).toBe("r-1");
      expect(await journal.work.claim("worker-1", LEASE_MS, root)).toBeUndefined();
      expect((await journal.work.claimMany(["worker-2", "worker-3"], LEASE_MS, root)).length).toBe(0);
      expect((await journal.work.get("o-1"))?.state).toBe("ready");
      // Without a root, any root's oldest.
      expect((await journal.work.claim("worker-9", LEASE_MS))?.id).toBe("o-1");
    });

    test(`${backend.name}: claimMany leases the oldest items to the workers in order, fewer when fewer are ready`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["m-1", "m-2", "m-3"]);
      expect(await journal.work.claimMany([], LEASE_MS, root)).toEqual([]);
      const two = await journal.work.claimMany(["w-a", "w-b"], LEASE_MS, root);
      expect(two.map((w) => [w.id, w.workerId, w.state])).toEqual([
        ["m-1", "w-a", "leased"],
        ["m-2", "w-b", "leased"],
      ]);
      const rest = await journal.work.claimMany(["w-c", "w-d", "w-e"], LEASE_MS, root);
      expect(rest.map((w) => [w.id, w.workerId])).toEqual([["m-3", "w-c"]]);
      expect(await journal.work.claimMany(["w-f"], LEASE_MS, root)).toEqual([]);
    });

    test(`${backend.name}: claimItem leases one given ready item, out of queue order; not one that is leased or done`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["i-1", "i-2"]);
      const second = await journal.work.claimItem("i-2", "settler", LEASE_MS);
      expect([second?.id, second?.workerId, second?.state, second?.epoch]).toEqual(["i-2", "settler", "leased", 1]);
      expect(await journal.work.get("i-2")).toEqual(second);
      expect(await journal.work.claimItem("i-2", "other", LEASE_MS)).toBeUndefined();
      expect(await journal.work.claimItem("no-such-item", "other", LEASE_MS)).toBeUndefined();
      // The queue's oldest is still there for the next claim.
      expect((await journal.work.claim("worker-1", LEASE_MS, root))?.id).toBe("i-1");
      await journal.work.complete(fence(second!), done("x"), { id: "op-i2", digest: "d" });
      expect(await journal.work.claimItem("i-2", "other", LEASE_MS)).toBeUndefined();
    });

    test(`${backend.name}: renewals are fenced: only the holder's current (worker, generation, epoch) extends a lease`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["h-1", "h-2"]);
      const a = (await journal.work.claim("worker-1", 1_000, root))!;
      const b = (await journal.work.claim("worker-2", 1_000, root))!;
      const wrong: WorkFence[] = [
        { ...fence(a), workerId: "worker-2" },
        { ...fence(a), epoch: a.epoch + 1 },
        { ...fence(a), generation: a.generation + 1 },
      ];
      expect(await journal.work.renew([fence(a), ...wrong, fence(b)], LEASE_MS)).toEqual(wrong);
      expect((await journal.work.get(a.id))!.leaseExpiresAt).toBeGreaterThan(a.leaseExpiresAt!);
      expect(await journal.work.renew([], LEASE_MS)).toEqual([]);
      // A finished item is not renewed.
      await journal.work.complete(fence(b), done("b"), { id: "op-b", digest: "d" });
      expect(await journal.work.renew([fence(b)], LEASE_MS)).toEqual([fence(b)]);
    });

    test(`${backend.name}: a commit is fenced; a stale one changes nothing and says where the item is`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["c-1"]);
      const item = (await journal.work.claim("worker-1", LEASE_MS, root))!;
      for (const stale of [{ ...fence(item), workerId: "worker-2" }, { ...fence(item), epoch: item.epoch - 1 }, { ...fence(item), generation: 2 }]) {
        const receipt = await journal.work.complete(stale, done("stale"), { id: `op-${JSON.stringify(stale)}`, digest: "x" });
        expect(receipt.status).toBe("stale");
        if (receipt.status === "stale") expect(receipt.item).toMatchObject({ id: "c-1", state: "leased", workerId: "worker-1", epoch: item.epoch });
      }
      // A commit's receipt names no item (CompletionReceipt): the queue has it.
      expect(await journal.work.complete(fence(item), done("ok"), { id: "op-1", digest: "d1" })).toEqual({ status: "committed" });
      expect(await journal.work.get("c-1")).toMatchObject({ state: "completed", result: { status: "completed", text: "ok" }, leaseExpiresAt: null });
      // Once final, the holder itself can commit nothing more.
      expect((await journal.work.complete(fence(item), done("again"), { id: "op-2", digest: "d2" })).status).toBe("stale");
      const failed = await journal.work.complete(fence(item), { state: "failed", error: { name: "E", code: "x", message: "m" } }, { id: "op-3", digest: "d3" });
      expect(failed.status).toBe("stale");
      expect((await journal.work.get("c-1"))?.result).toEqual({ status: "completed", text: "ok" });
    });

    test(`${backend.name}: operation ids: a retry gets the first receipt, a reused id with another body is refused`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["i-1", "i-2"]);
      const item = (await journal.work.claim("worker-1", LEASE_MS, root))!;
      const first = await journal.work.complete(fence(item), done("one"), { id: "op-same", digest: "digest-1" });
      expect(first.status).toBe("committed");
      const retry = await journal.work.complete(fence(item), done("one"), { id: "op-same", digest: "digest-1" });
      expect(retry).toEqual(first);
      expect(await journal.work.complete(fence(item), done("two"), { id: "op-same", digest: "digest-2" })).toEqual({ status: "op_conflict" });
      // The same id for another item is a conflict too, and commits nothing there.
      const other = (await journal.work.claim("worker-2", LEASE_MS, root))!;
      expect(await journal.work.complete(fence(other), done("one"), { id: "op-same", digest: "digest-1" })).toEqual({ status: "op_conflict" });
      expect((await journal.work.get(other.id))?.state).toBe("leased");
      expect((await journal.work.get(item.id))?.result).toEqual({ status: "completed", text: "one" });
    });

    test(`${backend.name}: completeAndClaim commits and leases the worker's next item in one call`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["n-1", "n-2", "n-3"]);
      const item = (await journal.work.claim("worker-1", LEASE_MS, root))!;
      const { receipt, next } = await journal.work.completeAndClaim(fence(item), done("1"), { id: "op-n1", digest: "d" }, { leaseMs: LEASE_MS, root });
      expect(receipt.status).toBe("committed");
      expect(next).toMatchObject({ id: "n-2", state: "leased", workerId: "worker-1" });
      expect((await journal.work.get("n-1"))?.state).toBe("completed");

      // A retry of the same commit gets the first receipt and claims nothing more.
      const retry = await journal.work.completeAndClaim(fence(item), done("1"), { id: "op-n1", digest: "d" }, { leaseMs: LEASE_MS, root });
      expect(retry).toEqual({ receipt, next: undefined });
      expect((await journal.work.get("n-3"))?.state).toBe("ready");
      // Neither does a conflicting or a stale one.
      expect(await journal.work.completeAndClaim(fence(item), done("x"), { id: "op-n1", digest: "other" }, { leaseMs: LEASE_MS, root })).toEqual({
        receipt: { status: "op_conflict" },
        next: undefined,
      });
      const stale = await journal.work.completeAndClaim({ ...fence(next!), epoch: next!.epoch + 1 }, done("x"), { id: "op-stale", digest: "d" }, { leaseMs: LEASE_MS, root });
      expect(stale.receipt.status).toBe("stale");
      expect(stale.next).toBeUndefined();
      expect((await journal.work.get("n-3"))?.state).toBe("ready");

      const second = await journal.work.completeAndClaim(fence(next!), done("2"), { id: "op-n2", digest: "d" }, { leaseMs: LEASE_MS, root });
      expect(second.next?.id).toBe("n-3");
      const last = await journal.work.completeAndClaim(fence(second.next!), done("3"), { id: "op-n3", digest: "d" }, { leaseMs: LEASE_MS, root });
      expect(last.receipt.status).toBe("committed");
      expect(last.next).toBeUndefined();
      expect(await journal.work.count("completed")).toBe(3);
    });

    test(`${backend.name}: completeMany commits several workers' outcomes in order, each as it would be alone`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["m-1", "m-2", "m-3", "m-4", "m-5"]);
      const a = (await journal.work.claim("worker-a", LEASE_MS, root))!;
      const b = (await journal.work.claim("worker-b", LEASE_MS, root))!;
      const c = (await journal.work.claim("worker-c", LEASE_MS, root))!;
      const claimNext = { leaseMs: LEASE_MS, root };
      const out = await journal.work.completeMany([
        { fence: fence(a), outcome: done("a"), op: { id: "op-a", digest: "d" }, claimNext },
        // Stale (a replaced holder): refused, claims nothing.
        { fence: { ...fence(b), epoch: b.epoch + 1 }, outcome: done("x"), op: { id: "op-x", digest: "d" }, claimNext },
        // Committed without a next item (a paused pool).
        { fence: fence(c), outcome: done("c"), op: { id: "op-c", digest: "d" } },
        // The same operation again in the same call: its first receipt, nothing claimed.
        { fence: fence(a), outcome: done("a"), op: { id: "op-a", digest: "d" }, claimNext },
        { fence: fence(b), outcome: done("b"), op: { id: "op-b", digest: "d" }, claimNext },
      ]);
      expect(out.map((o) => o.receipt.status)).toEqual(["committed", "stale", "committed", "committed", "committed"]);
      // FIFO across the call: worker-a got the oldest ready item, worker-b the one after.
      expect(out.map((o) => o.next?.id)).toEqual(["m-4", undefined, undefined, undefined, "m-5"]);
      expect(out[0]!.next).toMatchObject({ state: "leased", workerId: "worker-a" });
      expect(out[4]!.next).toMatchObject({ state: "leased", workerId: "worker-b" });
      for (const [id, text] of [["m-1", "a"], ["m-2", "b"], ["m-3", "c"]] as const) {
        expect((await journal.work.get(id))?.result).toEqual({ status: "completed", text });
      }
      expect(await journal.work.completeMany([])).toEqual([]);
    });

    test(`${backend.name}: a released item comes back at the next generation; its old holder is stale`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["g-1"]);
      const first = (await journal.work.claim("worker-1", LEASE_MS, root))!;
      const released = await journal.work.release(fence(first), 3, WORKER_LOST);
      expect(released.status).toBe("committed");
      if (released.status === "committed") expect(released.item).toMatchObject({ state: "ready", generation: 2, workerId: null, leaseExpiresAt: null });
      // Releasing twice (a stale fence) changes nothing.
      expect((await journal.work.release(fence(first), 3, WORKER_LOST)).status).toBe("stale");

      const second = (await journal.work.claim("worker-2", LEASE_MS, root))!;
      expect(second).toMatchObject({ id: "g-1", generation: 2, workerId: "worker-2" });
      expect(second.epoch).toBeGreaterThan(first.epoch);
      // The first worker, back from the dead, can neither renew nor commit.
      expect(await journal.work.renew([fence(first)], LEASE_MS)).toEqual([fence(first)]);
      expect((await journal.work.complete(fence(first), done("late"), { id: "op-late", digest: "d" })).status).toBe("stale");
      expect((await journal.work.complete(fence(second), done("on time"), { id: "op-on-time", digest: "d" })).status).toBe("committed");
      expect((await journal.work.get("g-1"))?.result).toEqual({ status: "completed", text: "on time" });
    });

    test(`${backend.name}: after the last generation a released item fails with the given error`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["l-1"]);
      for (let generation = 1; generation <= 3; generation++) {
        const item = (await journal.work.claim(`worker-${generation}`, LEASE_MS, root))!;
        expect(item.generation).toBe(generation);
        const receipt = await journal.work.release(fence(item), 3, WORKER_LOST);
        expect(receipt.status).toBe("committed");
        if (receipt.status !== "committed") continue;
        if (generation < 3) expect(receipt.item).toMatchObject({ state: "ready", generation: generation + 1 });
        else expect(receipt.item).toMatchObject({ state: "failed", generation: 3, error: WORKER_LOST });
      }
      expect(await journal.work.claim("worker-4", LEASE_MS, root)).toBeUndefined();
      expect(await journal.work.get("l-1")).toMatchObject({ state: "failed", error: WORKER_LOST, leaseExpiresAt: null });
    });

    test(`${backend.name}: abandon, fenced by the root's lease, takes earlier drives' ready and leased items off the queue, and nothing else`, async () => {
      const { journal, rootId, lease, root } = await setup();
      const other = await startRoot(journal, "wq");
      await enqueue(journal, lease, rootId, ["a-1", "a-2", "a-3"]);
      await enqueue(journal, other.lease, other.rootId, ["o-1"]);
      const leased = (await journal.work.claim("worker-1", LEASE_MS, root))!;
      const finished = (await journal.work.claim("worker-2", LEASE_MS, root))!;
      await journal.work.complete(fence(finished), done("kept"), { id: "op-kept", digest: "d" });
      // The drive that enqueued them abandons none of its own.
      expect(await journal.work.abandon(lease)).toBe(0);

      // A resume takes the lease over (epoch + 1) and abandons what the earlier drive left.
      const resumed = await journal.acquireLease(rootId, liveHolder("resume"), { timeoutMs: LEASE_MS, force: true });
      await expect(journal.work.abandon(lease)).rejects.toMatchObject({ code: "lease_lost" });
      expect((await journal.work.get("a-1"))?.state).toBe("leased");
      expect(await journal.work.abandon(resumed)).toBe(2);
      expect((await journal.work.list(rootId)).map((w) => [w.id, w.state])).toEqual([
        ["a-1", "abandoned"],
        ["a-2", "completed"],
        ["a-3", "abandoned"],
      ]);
      expect(await journal.work.claim("worker-3", LEASE_MS, { rootId, epoch: resumed.epoch })).toBeUndefined();
      expect((await journal.work.complete(fence(leased), done("late"), { id: "op-abandoned", digest: "d" })).status).toBe("stale");
      expect((await journal.work.get("o-1"))?.state).toBe("ready");
      expect(await journal.work.abandon(resumed)).toBe(0);
      expect(await journal.work.count("abandoned")).toBe(2);
      expect(await journal.work.count()).toBe(4);
    });

    test(`${backend.name}: a claim refuses items whose root lease is stale: a taken-over drive's pool claims nothing, an unscoped claim abandons them`, async () => {
      const { journal, rootId, lease, root } = await setup();
      await enqueue(journal, lease, rootId, ["s-1", "s-2"]);
      expect((await journal.work.get("s-1"))?.rootEpoch).toBe(lease.epoch);
      const resumed = await journal.acquireLease(rootId, liveHolder("resume"), { timeoutMs: LEASE_MS, force: true });
      const scope = { rootId, epoch: resumed.epoch };
      // The old drive's pool: its lease moved on, so it claims nothing at all, not even what the new drive enqueues.
      expect(await journal.work.claim("old-worker", LEASE_MS, root)).toBeUndefined();
      await enqueue(journal, resumed, rootId, ["n-1"]);
      expect(await journal.work.claimMany(["old-1", "old-2"], LEASE_MS, root)).toEqual([]);
      expect((await journal.work.get("n-1"))?.rootEpoch).toBe(resumed.epoch);
      // The new drive's pool takes only its own item; an unscoped claim abandons the stale ones on its way.
      expect((await journal.work.claim("new-worker", LEASE_MS, scope))?.id).toBe("n-1");
      expect(await journal.work.claim("any-worker", LEASE_MS, scope)).toBeUndefined();
      expect(await journal.work.claim("any-worker", LEASE_MS)).toBeUndefined();
      expect(Object.fromEntries((await journal.work.list(rootId)).map((w) => [w.id, w.state]))).toEqual({ "s-1": "abandoned", "s-2": "abandoned", "n-1": "leased" });
      // An expired lease fences its items too: its driver stopped itself before the expiry.
      const short = await startRoot(journal, "wq");
      const brief = await journal.acquireLease(short.rootId, liveHolder("brief"), { timeoutMs: 50, force: true });
      await enqueue(journal, brief, short.rootId, ["e-1"]);
      await waitUntil(() => Date.now() > brief.renewedAt + brief.timeoutMs, 10_000, "the brief lease to expire");
      expect(await journal.work.claim("new-worker", LEASE_MS, { rootId: short.rootId, epoch: brief.epoch })).toBeUndefined();
      expect((await journal.work.get("e-1"))?.state).toBe("ready");
      // A released lease fences its items too.
      await enqueue(journal, resumed, rootId, ["n-2"]);
      await journal.releaseLease(resumed);
      expect(await journal.work.claim("new-worker", LEASE_MS, scope)).toBeUndefined();
      expect(await journal.work.claim("any-worker", LEASE_MS)).toBeUndefined();
      expect((await journal.work.get("n-2"))?.state).toBe("abandoned");
    });
  });
}

describe("sqlite: schema versions 4, 6 and 10", () => {
  test("the version an open checks against is the one the last migration writes", () => {
    // schema-version.ts states it without loading the migrations (and Kysely); they must agree.
    expect(MIGRATIONS[MIGRATIONS.length - 1]!.version).toBe(LATEST_SCHEMA_VERSION);
  });

  test("a version 3 journal migrates: items and operations kept (on their items), an old operation still answers its retry, the new indexes in place", async () => {
    const dir = makeTempDir("atomic-mig4-");
    const file = `${dir}/atomic.db`;
    const db = await sqliteAtVersion(dir, 3);
    // As version 3 code left them: a committed item whose operation kept its receipt whole, and a ready one.
    const rootId = insertOldRoot(db, "running", 2);
    const insertItem = db.prepare(
      `insert into work_items (id, root_id, run_id, stage_key, attempt, descriptor, state, generation, worker_id, epoch, ready_at, created_at, updated_at, result)
       values (?, ?, ?, ?, 1, ?, ?, 1, ?, ?, ?, 1, 1, ?)`,
    );
    insertItem.run("old-1", rootId, rootId, "k-1", '{"command":"echo old"}', "completed", "worker-1", 1, 1, '{"status":"completed","text":"old"}');
    insertItem.run("old-2", rootId, rootId, "k-2", '{"command":"echo two"}', "ready", null, 0, 2, null);
    const item = { id: "old-1", workerId: "worker-1", generation: 1, epoch: 1 };
    const whole = JSON.stringify({ status: "committed", item: { id: "old-1", state: "completed", result: { status: "completed", text: "old" } } });
    db.run("insert into work_ops (op_id, work_id, digest, receipt, at) values ('op-old', 'old-1', 'd-old', ?, 1)", [whole]);
    db.close();

    const j = await sqlite.open(dir);
    open.push(j);
    expect(sqlite.readSchemaVersion!(dir)).toBe(LATEST_SCHEMA_VERSION);
    expect((await j.work.list(rootId)).map((i) => [i.id, i.state])).toEqual([
      ["old-1", "completed"],
      ["old-2", "ready"],
    ]);
    // The retry of the old operation (its receipt was stored whole) is answered; the same id with another body is a conflict.
    expect(await j.work.complete(item, done("old"), { id: "op-old", digest: "d-old" })).toEqual({ status: "committed" });
    expect(await j.work.complete(item, done("other"), { id: "op-old", digest: "d-new" })).toEqual({ status: "op_conflict" });
    // The ready item was enqueued by an earlier drive (no root epoch before version 6): no claim takes it.
    expect(await j.work.claim("worker-2", LEASE_MS)).toBeUndefined();
    expect((await j.work.get("old-2"))?.state).toBe("abandoned");
    // New operations are stored on their items and answer their retries.
    const lease = await j.acquireLease(rootId, liveHolder("mig"), { timeoutMs: LEASE_MS });
    await j.append(lease, [
      { runId: rootId, type: "step_started", key: "k-3", payload: {}, work: { id: "new-3", stageKey: "k-3", attempt: 1, descriptor: {} } },
    ]);
    const next = (await j.work.claim("worker-2", LEASE_MS, { rootId, epoch: lease.epoch }))!;
    expect(next.id).toBe("new-3");
    const first = await j.work.complete(fence(next), done("two"), { id: "op-new", digest: "d" });
    expect(await j.work.complete(fence(next), done("two"), { id: "op-new", digest: "d" })).toEqual(first);
    await j.close();
    open.pop();
    const raw = new Database(file, { readonly: true });
    try {
      expect(raw.query("select sql from sqlite_master where name = 'work_ops'").get()).toBeNull();
      expect(raw.query<{ sql: string }, []>("select sql from sqlite_master where name = 'work_by_root'").get()!.sql).toContain("(root_id)");
      expect(raw.query<{ sql: string }, []>("select sql from sqlite_master where name = 'work_by_op'").get()!.sql).toContain("UNIQUE INDEX");
      expect(raw.query("select id, op_id, op_digest from work_items where op_id is not null order by id").all()).toEqual([
        { id: "new-3", op_id: "op-new", op_digest: "d" },
        { id: "old-1", op_id: "op-old", op_digest: "d-old" },
      ]);
      expect(raw.query("pragma foreign_key_check").all()).toEqual([]);
    } finally {
      raw.close();
    }
  });
});

/**
 * What only the Postgres work queue has: its schema version 2 (the ready
 * items of a drive indexed by root and root epoch, which its claims read),
 * and the races the SQLite queue cannot have (one writer at a time there):
 * statements of several processes, each on connections of its own, meeting
 * on the same rows of a shared database.
 * - Four processes claiming and committing one queue at once: every item is
 *   claimed exactly once (FOR UPDATE SKIP LOCKED; no lease handed out twice).
 * - An item's takeover (released and leased to a new worker) racing its old
 *   worker's renewals: once a renewal is refused it stays refused, and no
 *   renewal of the old worker extends or changes the new worker's lease.
 * - A root's takeover racing its old drive's claims: after the takeover the
 *   old pool claims nothing (beyond a claim in flight), and once the new
 *   drive has abandoned the old drive's items none of them is leased or
 *   ready (a claim that passed its lease check before the takeover is caught
 *   by the abandon's row locks).
 * - Four processes sending to one stage path at once: exactly
 *   MAX_QUEUED_PER_STAGE queued (the root's advisory lock keeps two senders
 *   from both taking the last place); with the path's stages starting
 *   meanwhile, every message is delivered to one stage, once.
 * - A message sent while a stage's start record is being committed: the
 *   sender waits on the root's lease row, then sees the started stage and
 *   binds its delivery to it (it is never queued for a stage that started
 *   unseen).
 * Runs when the postgres backend is selected (backends.ts); the child
 * processes are test/helpers/pg-race-worker.ts.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import type { AppendEntry } from "../../src/journal/append.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { MAX_QUEUED_PER_STAGE } from "../../src/journal/messages.ts";
import type { Lease } from "../../src/journal/runs.ts";
import type { WorkFence, WorkItem } from "../../src/journal/work-queue.ts";
import pg from "pg";
import { openJournal } from "../../src/journal/open.ts";
import { MIGRATIONS } from "../../src/journal/postgres/migrations.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { freshDatabase } from "../helpers/postgres.ts";
import { untilSomeoneWaitsForLock } from "../helpers/pg-lock-wait.ts";
import { BUN, ROOT, lineWatcher } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, liveHolder, postgresUrlFor, startRoot } from "./backends.ts";

const WORKER = join(ROOT, "test", "helpers", "pg-race-worker.ts");
const LEASE_MS = 60_000;
const postgres = BACKENDS.find((b) => b.name === "postgres");

const open: Journal[] = [];
const procs: Subprocess[] = [];
afterEach(async () => {
  for (const p of procs.splice(0)) {
    p.kill("SIGKILL");
    await p.exited;
  }
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

interface Worker {
  go(): void;
  done: Promise<Record<string, unknown>>;
}

/** A pg-race-worker process on the journal's URL, ready (journal open) when this resolves. */
async function worker(url: string, mode: string, args: Record<string, unknown>): Promise<Worker> {
  // Its home is the test's (removed after each test), not the worker's: afterEach may SIGKILL a worker before it cleans up.
  const home = makeTempDir("atomic-pg-race-worker-");
  const proc = Bun.spawn([BUN, WORKER, url, mode, JSON.stringify(args), home], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  procs.push(proc);
  const lines = lineWatcher(proc.stdout);
  await lines.waitFor(/"type":"ready"/);
  const done = lines.waitFor(/"type":"(done|error)"/, 120_000).then((line) => {
    const msg = JSON.parse(line) as Record<string, unknown>;
    if (msg.type === "error") throw new Error(`pg-race-worker ${mode}: ${String(msg.message)}`);
    return msg;
  });
  return {
    go: () => {
      proc.stdin.write("go\n");
      proc.stdin.flush();
    },
    done,
  };
}

/** Enqueues `n` items on the root, in appends of 50 entries. */
async function enqueue(journal: Journal, lease: Lease, rootId: RunId, prefix: string, n: number): Promise<string[]> {
  const ids = Array.from({ length: n }, (_, i) => `${prefix}-${String(i).padStart(4, "0")}`);
  for (let i = 0; i < ids.length; i += 50) {
    const entries: AppendEntry[] = ids.slice(i, i + 50).map((id) => ({
      runId: rootId,
      type: "step_started",
      key: `k-${id}`,
      payload: { id },
      durable: false,
      work: { id, stageKey: `k-${id}`, attempt: 1, descriptor: { command: `echo ${id}` } },
    }));
    await journal.append(lease, entries);
  }
  return ids;
}

const fenceOf = (w: WorkItem): WorkFence => ({ id: w.id, workerId: w.workerId!, generation: w.generation, epoch: w.epoch });

describe.if(postgres !== undefined)("postgres: work queue races between processes", () => {
  async function setup(): Promise<{ journal: Journal; url: string; rootId: RunId; lease: Lease }> {
    const dir = makeTempDir("atomic-pg-race-");
    const journal = await postgres!.open(dir);
    open.push(journal);
    const { rootId, lease } = await startRoot(journal, "race");
    return { journal, url: await postgresUrlFor(dir), rootId, lease };
  }

  test("postgres: four processes claiming and committing one queue at once claim every item exactly once", async () => {
    const { journal, url, rootId, lease } = await setup();
    const ids = await enqueue(journal, lease, rootId, "q", 400);
    const workers = await Promise.all(
      [1, 2, 3, 4].map((p) => worker(url, "drain", { rootId, epoch: lease.epoch, workers: [`p${p}-a`, `p${p}-b`], leaseMs: LEASE_MS })),
    );
    for (const w of workers) w.go();
    const claimed = (await Promise.all(workers.map((w) => w.done))).map((d) => d.claimed as string[]);
    const all = claimed.flat();
    expect(all.length).toBe(ids.length);
    expect(new Set(all).size).toBe(ids.length);
    expect([...all].sort()).toEqual(ids);
    // Every process got a share (they raced, rather than one draining the queue alone).
    for (const c of claimed) expect(c.length).toBeGreaterThan(0);
    expect(await journal.work.count("completed")).toBe(ids.length);
    for (const item of await journal.work.list(rootId)) expect([item.state, item.generation, item.epoch]).toEqual(["completed", 1, 1]);
  });

  test("postgres: a takeover racing the old worker's renewals: refused renewals stay refused, the new lease is untouched", async () => {
    const { journal, url, rootId, lease } = await setup();
    const ids = await enqueue(journal, lease, rootId, "t", 60);
    const old: WorkItem[] = [];
    for (const [i] of ids.entries()) old.push((await journal.work.claim(`old-${i}`, LEASE_MS, { rootId, epoch: lease.epoch }))!);
    const fences = old.map(fenceOf);
    const renewer = await worker(url, "renew", { fences, leaseMs: LEASE_MS });
    const taker = await worker(url, "take", { fences, leaseMs: LEASE_MS });
    renewer.go();
    taker.go();
    const [renewed, took] = await Promise.all([renewer.done, taker.done]);
    const outcomes = renewed.outcomes as boolean[][];
    for (const seq of outcomes) {
      // held, held, ..., stale, stale: never held again once refused
      const firstStale = seq.indexOf(false);
      expect(firstStale).toBeGreaterThanOrEqual(0);
      expect(seq.slice(firstStale).every((held) => !held)).toBe(true);
    }
    const taken = took.taken as WorkItem[];
    for (const [i, item] of taken.entries()) {
      const now = (await journal.work.get(item.id))!;
      // Exactly the lease the taker wrote last: no renewal of the old worker's landed after it.
      expect(now).toEqual(item);
      expect([now.state, now.workerId, now.generation]).toEqual(["leased", `new-${i}`, 2]);
      expect((await journal.work.complete(fences[i]!, { state: "completed", result: "old" }, { id: `old-${i}`, digest: "d" })).status).toBe("stale");
      expect((await journal.work.complete(fenceOf(now), { state: "completed", result: "new" }, { id: `new-${i}`, digest: "d" })).status).toBe("committed");
    }
  });

  test("postgres: a root's takeover racing its old drive's claims: the old pool claims nothing after it; after the abandon nothing of the old drive is leased or ready", async () => {
    const { journal, url, rootId, lease } = await setup();
    const ids = await enqueue(journal, lease, rootId, "r", 1_000);
    const claimers = await Promise.all([1, 2].map((p) => worker(url, "claim", { rootId, epoch: lease.epoch, worker: `old-${p}`, leaseMs: LEASE_MS })));
    for (const c of claimers) c.go();
    // Take the root over while the old drive's claims are under way.
    while ((await journal.work.count("leased")) < 20) await Bun.sleep(2);
    const resumed = await journal.acquireLease(rootId, liveHolder("resume"), { timeoutMs: LEASE_MS, force: true });
    const leasedAtTakeover = await journal.work.count("leased");
    const claimed = (await Promise.all(claimers.map((c) => c.done))).flatMap((d) => d.claimed as string[]);
    expect(new Set(claimed).size).toBe(claimed.length);
    // At most the claim each process had in flight when the takeover committed lands after it.
    const leased = await journal.work.count("leased");
    expect(leased - leasedAtTakeover).toBeLessThanOrEqual(claimers.length);
    expect(leased).toBeLessThan(ids.length);
    expect(await journal.work.count("ready")).toBe(ids.length - leased);
    const abandoned = await journal.work.abandon(resumed);
    const items = await journal.work.list(rootId);
    expect(items.length).toBe(ids.length);
    expect(items.filter((w) => w.state !== "abandoned")).toEqual([]);
    expect(abandoned).toBe(ids.length);
    // Nothing more for anyone: the old scope is fenced, the new drive enqueued nothing yet.
    expect(await journal.work.claim("late", LEASE_MS, { rootId, epoch: lease.epoch })).toBeUndefined();
    expect(await journal.work.claim("new", LEASE_MS, { rootId, epoch: resumed.epoch })).toBeUndefined();
  });
});

describe.if(postgres !== undefined)("postgres: message store races between processes", () => {
  test(`postgres: four processes sending to one stage at once: exactly ${MAX_QUEUED_PER_STAGE} queued; with stages starting meanwhile each message is delivered once`, async () => {
    const dir = makeTempDir("atomic-pg-race-");
    const journal = await postgres!.open(dir);
    open.push(journal);
    const { rootId, lease } = await startRoot(journal, "mail");
    const url = await postgresUrlFor(dir);
    const burst = async (round: string, perProcess: number) => {
      const senders = await Promise.all(
        [1, 2, 3, 4].map((p) => worker(url, "send", { rootId, path: "busy", ids: Array.from({ length: perProcess }, (_, i) => `${round}-p${p}-${i}`) })),
      );
      for (const s of senders) s.go();
      return Promise.all(senders.map((s) => s.done));
    };
    const count = (results: Record<string, unknown>[]) => ({
      queued: results.reduce((n, r) => n + (r.queued as number), 0),
      refused: results.flatMap((r) => r.refused as string[]),
    });
    const queuedNow = async () => (await journal.messages.messagesOf(rootId)).deliveries.filter((d) => d.state === "queued").length;

    // 1. Nobody takes any: the last places are contended, and exactly the limit is queued.
    const first = count(await burst("a", 25));
    expect(first.queued).toBe(MAX_QUEUED_PER_STAGE);
    expect(first.refused).toEqual(Array(100 - MAX_QUEUED_PER_STAGE).fill("queue_full"));
    expect(await queuedNow()).toBe(MAX_QUEUED_PER_STAGE);

    // 2. Stages of that path start while four processes send: each takes what is queued for it, once.
    const sending = burst("b", 25);
    let done = false;
    void sending.finally(() => (done = true)).catch(() => {});
    let stages = 0;
    while (!done || stages === 0) {
      await journal.messages.claimForStage(lease, { runId: rootId, stageKey: `s${stages}`, path: "busy", name: "busy", attempt: 1 }, () => false, () => undefined);
      stages++;
      await Bun.sleep(5);
    }
    const second = count(await sending);
    expect(second.refused.every((code) => code === "queue_full")).toBe(true);
    const { messages, deliveries } = await journal.messages.messagesOf(rootId);
    const sent = first.queued + second.queued;
    expect(messages.length).toBe(sent);
    // One delivery per message: delivered to one stage, or still queued (at most the limit).
    expect(deliveries.length).toBe(sent);
    expect(new Set(deliveries.map((d) => d.messageId)).size).toBe(sent);
    expect(await queuedNow()).toBeLessThanOrEqual(MAX_QUEUED_PER_STAGE);
    for (const d of deliveries.filter((x) => x.state === "delivered")) expect(d.stageKey).toMatch(/^s\d+$/);
  });
  test("postgres: a message sent while a stage's start is being recorded waits for it, sees the stage and is bound to it (delivered live)", async () => {
    const dir = makeTempDir("atomic-pg-race-");
    const journal = await postgres!.open(dir);
    open.push(journal);
    const { rootId } = await startRoot(journal, "mail");
    const u = new URL(await postgresUrlFor(dir));
    const schema = u.searchParams.get("schema")!;
    u.search = "";
    const driver = new pg.Client({ connectionString: u.toString(), options: `-c search_path=${schema}` });
    await driver.connect();
    try {
      // What an append of the stage's start record does: the lease row FOR SHARE to the commit, the stage's row written.
      await driver.query("begin");
      await driver.query("select 1 from leases where run_id = $1 for share", [rootId]);
      await driver.query(
        "insert into stage_index (root_id, run_id, stage_key, path, name, kind, state, attempt, updated_at) values ($1, $1, '7', 'build', 'build', 'stage', 'running', 1, 0)",
        [rootId],
      );
      let seen: string[] | undefined;
      const sending = journal.messages.enqueue(
        { rootId, id: "m", target: "build", text: "hi", mode: "steer", sticky: false, sender: "race", lookup: { paths: ["build"] } },
        ({ stages }) => {
          seen = stages.map((x) => x.key);
          const live = stages.find((x) => x.path === "build" && x.state === "running");
          return [live ? { stagePath: "build", runId: live.runId, stageKey: live.key } : { stagePath: "build" }];
        },
      );
      // The sender waits for the start's commit rather than reading around it.
      await untilSomeoneWaitsForLock(driver);
      expect(seen).toBeUndefined();
      await driver.query("commit");
      const sent = await sending;
      expect(seen).toEqual(["7"]);
      expect(sent.deliveries).toMatchObject([{ stagePath: "build", runId: rootId, stageKey: "7", state: "queued" }]);
      expect((await journal.messages.liveQueued(rootId)).map((d) => d.messageId)).toEqual(["m"]);
    } finally {
      await driver.end();
    }
  });
});

describe.if(postgres !== undefined)("postgres: work queue schema", () => {
  test("postgres: a version 1 journal migrates to version 2, and a drive's claims read its ready items from the index by root", async () => {
    const url = await freshDatabase("wq");
    const admin = new pg.Pool({ connectionString: url, max: 1 });
    try {
      // The tables as version 1 left them.
      await admin.query("create schema atomic");
      await admin.query("set search_path to atomic");
      for (const statement of MIGRATIONS.find((m) => m.version === 1)!.statements) await admin.query(statement);
      await admin.query("insert into meta (key, value) values ('schema_version', '1')");
      const journal = await openJournal({ home: makeTempDir("atomic-pg-mig-"), durability: "normal", journalUrl: url });
      open.push(journal);
      const { rootId, lease } = await startRoot(journal, "mig");
      await enqueue(journal, lease, rootId, "m", 3);
      expect((await journal.work.claim("w", LEASE_MS, { rootId, epoch: lease.epoch }))?.id).toBe("m-0000");
      const version = await admin.query("select value from atomic.meta where key = 'schema_version'");
      expect(version.rows).toEqual([{ value: String(MIGRATIONS.at(-1)!.version) }]);
      // The planner takes the drive's index even for a tiny table when sequential scans are off (what it does once
      // other runs queue many items); the claim's inner select, as work-queue.ts writes it.
      await admin.query("set enable_seqscan = off");
      const plan = await admin.query(
        "explain select id from atomic.work_items where state = 'ready' and root_id = $1 and root_epoch = $2 order by ready_at, id limit 4 for update skip locked",
        [rootId, lease.epoch],
      );
      expect(plan.rows.map((r) => Object.values(r)[0]).join("\n")).toContain("work_ready_by_root");
    } finally {
      await admin.end();
    }
  });
});

/**
 * The journal contract (src/journal/journal.ts and the contract files it names), run against every backend
 * in BACKENDS: gapless sequences, fencing, idempotency, compare-and-set,
 * per-entry savepoints, leases, control requests, listing, migrations and
 * group commit. Real databases in temp directories; no timing asserted.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GroupCommitWriter } from "../../src/journal/group-commit.ts";
import { openJournal } from "../../src/journal/open.ts";
import type { AppendEntry } from "../../src/journal/append.ts";
import type { Journal } from "../../src/journal/journal.ts";
import type { HolderInfo, Lease, NewRunFields } from "../../src/journal/runs.ts";
import { AtomicError, LeaseHeldError, LeaseLostError } from "../../src/shared/errors.ts";
import { newRunId, type HolderId, type RunId } from "../../src/shared/ids.ts";
import { hostId } from "../../src/shared/process-info.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { BACKENDS, liveHolder, testWhen } from "./backends.ts";

const open: Journal[] = [];

afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

function newRunFields(rootId: RunId, parent?: { id: RunId; depth: number }): NewRunFields {
  return {
    rootId,
    parentId: parent?.id ?? null,
    parentKey: parent ? "child-1" : null,
    depth: parent ? parent.depth + 1 : 0,
    workflowName: "demo",
    workflowPath: "/tmp/demo.ts",
    workflowDigest: "sha256:abc",
    inputs: { topic: "ducks" },
  };
}

function started(runId: RunId, rootId: RunId, at?: number, parent?: { id: RunId; depth: number }): AppendEntry {
  return {
    runId,
    type: "run_started",
    payload: { inputs: { topic: "ducks" } },
    newRun: newRunFields(rootId, parent),
    ...(at === undefined ? {} : { at }),
  };
}

function checkpoint(runId: RunId, n: number, extra: Partial<AppendEntry> = {}): AppendEntry {
  return { runId, type: "checkpoint", key: `step-${n}`, payload: { n }, ...extra };
}

async function expectCode(promise: Promise<unknown>, code: string): Promise<AtomicError> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(AtomicError);
    expect((err as AtomicError).code).toBe(code);
    return err as AtomicError;
  }
  throw new Error(`expected an error with code ${code}, but the promise resolved`);
}

async function seqs(journal: Journal, runId: RunId): Promise<number[]> {
  return (await journal.readEvents(runId)).map((e) => e.seq);
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

for (const backend of BACKENDS) {
  describe(backend.name, () => {
    async function openIn(dir = makeTempDir()): Promise<{ journal: Journal; dir: string }> {
      const journal = await backend.open(dir);
      open.push(journal);
      return { journal, dir };
    }

    /** A fresh journal with one root run (seq 1 = run_started) and its lease. */
    async function withRoot(): Promise<{ journal: Journal; dir: string; root: RunId; lease: Lease }> {
      const { journal, dir } = await openIn();
      const root = newRunId();
      const lease = await journal.acquireLease(root, liveHolder(), { timeoutMs: 60_000 });
      const [outcome] = await journal.append(lease, [started(root, root)]);
      expect(outcome).toEqual({ status: "appended", seq: 1 });
      return { journal, dir, root, lease };
    }

    test(`${backend.name}: appends get gapless seqs and update the run projection`, async () => {
      const { journal, root, lease } = await withRoot();
      for (let i = 1; i <= 5; i++) await journal.append(lease, [checkpoint(root, i)]);
      const outcomes = await journal.append(lease, [checkpoint(root, 6), checkpoint(root, 7), checkpoint(root, 8)]);
      expect(outcomes.map((o) => (o.status === "appended" ? o.seq : o.status))).toEqual([7, 8, 9]);
      expect(await seqs(journal, root)).toEqual(range(1, 9));

      const events = await journal.readEvents(root, 7);
      expect(events.map((e) => e.seq)).toEqual([8, 9]);
      expect(events[0]).toMatchObject({ runId: root, type: "checkpoint", key: "step-7", payload: { n: 7 } });
      expect((await journal.readEvents(root, 2, 3)).map((e) => e.seq)).toEqual([3, 4, 5]);

      const run = await journal.getRun(root);
      expect(run).toMatchObject({
        id: root,
        rootId: root,
        parentId: null,
        depth: 0,
        status: "running",
        lastSeq: 9,
        inputs: { topic: "ducks" },
        control: null,
        controlRev: 0,
      });
    });

    test(`${backend.name}: payloads round-trip, undefined and null stay distinct`, async () => {
      const { journal, root, lease } = await withRoot();
      await journal.append(lease, [
        { runId: root, type: "a", payload: undefined },
        { runId: root, type: "b", payload: null },
        { runId: root, type: "c", payload: { nested: [1, "two", { three: true }] } },
      ]);
      const events = await journal.readEvents(root, 1);
      expect(events.map((e) => e.payload)).toEqual([undefined, null, { nested: [1, "two", { three: true }] }]);
    });

    test(`${backend.name}: patches update status, outputs, error and endedAt`, async () => {
      const { journal, root, lease } = await withRoot();
      await journal.append(lease, [
        {
          runId: root,
          type: "status_changed",
          payload: { status: "failed" },
          patch: {
            status: "failed",
            outputs: { answer: 42 },
            error: { name: "StepFailedError", code: "step_failed", message: "boom" },
            endedAt: 1234,
            workflowDigest: "sha256:new",
          },
        },
      ]);
      expect(await journal.getRun(root)).toMatchObject({
        status: "failed",
        outputs: { answer: 42 },
        error: { name: "StepFailedError", code: "step_failed", message: "boom" },
        endedAt: 1234,
        workflowDigest: "sha256:new",
        lastSeq: 2,
      });
      // A patch touches only the fields it names.
      await journal.append(lease, [{ runId: root, type: "status_changed", payload: {}, patch: { status: "running", error: null, endedAt: null } }]);
      expect(await journal.getRun(root)).toMatchObject({
        status: "running",
        outputs: { answer: 42 },
        error: null,
        endedAt: null,
        workflowDigest: "sha256:new",
      });
    });

    test(`${backend.name}: fencing refuses the old holder after a takeover`, async () => {
      const { journal, root, lease } = await withRoot();
      const newer = await journal.acquireLease(root, liveHolder("newer"), { timeoutMs: 60_000, force: true });
      expect(newer.epoch).toBe(lease.epoch + 1);

      const lost = await journal.append(lease, [checkpoint(root, 1)]).catch((e: unknown) => e);
      expect(lost).toBeInstanceOf(LeaseLostError);
      expect(await seqs(journal, root)).toEqual([1]);
      expect((await journal.getRun(root))?.lastSeq).toBe(1);

      expect(await journal.renewLease(lease).catch((e: unknown) => e)).toBeInstanceOf(LeaseLostError);
      // Releasing a lost lease is a no-op: the newer holder keeps it.
      await journal.releaseLease(lease);
      expect(await journal.getLease(root)).toMatchObject({ holderId: newer.holderId, epoch: newer.epoch });

      expect(await journal.append(newer, [checkpoint(root, 1)])).toEqual([{ status: "appended", seq: 2 }]);
      const renewed = await journal.renewLease(newer);
      expect(renewed.epoch).toBe(newer.epoch);
    });

    test(`${backend.name}: idempotency keys return the first event`, async () => {
      const { journal, root, lease } = await withRoot();
      const first = await journal.append(lease, [checkpoint(root, 1, { idempotencyKey: "tool-1", payload: "first" })]);
      expect(first).toEqual([{ status: "appended", seq: 2 }]);
      await journal.append(lease, [checkpoint(root, 2)]);

      const again = await journal.append(lease, [checkpoint(root, 1, { idempotencyKey: "tool-1", payload: "second" })]);
      expect(again[0]).toMatchObject({ status: "exists", seq: 2, event: { seq: 2, payload: "first", idempotencyKey: "tool-1" } });

      // Within one batch too: the second entry with the key sees the first.
      const batch = await journal.append(lease, [
        checkpoint(root, 3, { idempotencyKey: "tool-2" }),
        checkpoint(root, 3, { idempotencyKey: "tool-2" }),
      ]);
      expect(batch[0]).toEqual({ status: "appended", seq: 4 });
      expect(batch[1]).toMatchObject({ status: "exists", seq: 4 });
      expect(await seqs(journal, root)).toEqual(range(1, 4));

      // Retrying the run-creating append with its key is "exists", not an error.
      const other = newRunId();
      const otherLease = await journal.acquireLease(other, liveHolder(), { timeoutMs: 60_000 });
      const create = { ...started(other, other), idempotencyKey: "create" };
      expect(await journal.append(otherLease, [create])).toEqual([{ status: "appended", seq: 1 }]);
      expect((await journal.append(otherLease, [create]))[0]).toMatchObject({ status: "exists", seq: 1 });
    });

    test(`${backend.name}: expectedSeq is a compare-and-set`, async () => {
      const { journal, root, lease } = await withRoot();
      await journal.append(lease, [checkpoint(root, 1)]);
      expect(await journal.append(lease, [checkpoint(root, 2, { expectedSeq: 1 })])).toEqual([
        { status: "conflict", lastSeq: 2, expectedSeq: 1 },
      ]);
      expect(await journal.append(lease, [checkpoint(root, 2, { expectedSeq: 2 })])).toEqual([
        { status: "appended", seq: 3 },
      ]);
      expect(await seqs(journal, root)).toEqual([1, 2, 3]);
    });

    test(`${backend.name}: a bad entry in a batch fails alone and seqs stay gapless`, async () => {
      const { journal, root, lease } = await withRoot();
      const foreign = newRunId();
      const foreignLease = await journal.acquireLease(foreign, liveHolder(), { timeoutMs: 60_000 });
      await journal.append(foreignLease, [started(foreign, foreign)]);

      const outcomes = await journal.append(lease, [
        checkpoint(root, 1),
        checkpoint(foreign, 1), // another root's run
        checkpoint(root, 2, { payload: { big: 10n } }), // JSON cannot hold a bigint
        checkpoint(newRunId(), 1), // no such run
        started(newRunId(), foreign), // a new run outside the leased root
        started(root, root), // the run exists already
        checkpoint(root, 3),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(["appended", "error", "error", "error", "error", "error", "appended"]);
      expect(outcomes[0]).toEqual({ status: "appended", seq: 2 });
      expect(outcomes[6]).toEqual({ status: "appended", seq: 3 });
      const codes = outcomes.map((o) => (o.status === "error" ? o.error.code : null));
      expect(codes).toEqual([null, "run_outside_lease", "error", "run_not_found", "run_outside_lease", "run_exists", null]);

      expect(await seqs(journal, root)).toEqual([1, 2, 3]);
      expect(await seqs(journal, foreign)).toEqual([1]);
      expect((await journal.getRun(root))?.lastSeq).toBe(3);
    });

    test(`${backend.name}: a lone bad entry reports an error and writes nothing`, async () => {
      const { journal, root, lease } = await withRoot();
      const [outcome] = await journal.append(lease, [checkpoint(root, 1, { payload: 1n })]);
      expect(outcome?.status).toBe("error");
      const run = newRunId();
      const [dup] = await journal.append(lease, [{ ...started(run, root), newRun: { ...newRunFields(root), inputs: 1n } }]);
      expect(dup?.status).toBe("error");
      expect(await journal.getRun(run)).toBeUndefined();
      expect(await journal.append(lease, [checkpoint(root, 1)])).toEqual([{ status: "appended", seq: 2 }]);
    });

    test(`${backend.name}: a lone event for another root's run, or for no run, is an error outcome and writes nothing`, async () => {
      const { journal, root, lease } = await withRoot();
      const foreign = newRunId();
      const foreignLease = await journal.acquireLease(foreign, liveHolder(), { timeoutMs: 60_000 });
      await journal.append(foreignLease, [started(foreign, foreign)]);
      const [outside] = await journal.append(lease, [checkpoint(foreign, 1)]);
      expect(outside).toMatchObject({ status: "error", error: { code: "run_outside_lease" } });
      const [missing] = await journal.append(lease, [checkpoint(newRunId(), 1)]);
      expect(missing).toMatchObject({ status: "error", error: { code: "run_not_found" } });
      expect(await seqs(journal, foreign)).toEqual([1]);
      expect(await journal.append(lease, [checkpoint(root, 1)])).toEqual([{ status: "appended", seq: 2 }]);
      expect((await journal.getRun(root))?.lastSeq).toBe(2);
    });

    test(`${backend.name}: creating a run that exists is an error outcome`, async () => {
      const { journal, root, lease } = await withRoot();
      const [outcome] = await journal.append(lease, [started(root, root)]);
      expect(outcome).toMatchObject({ status: "error", error: { code: "run_exists" } });
      expect(await seqs(journal, root)).toEqual([1]);
    });

    test(`${backend.name}: an expired lease is taken over with epoch + 1`, async () => {
      const { journal } = await openIn();
      const root = newRunId();
      const first = await journal.acquireLease(root, liveHolder("first"), { timeoutMs: 1 });
      expect(first.epoch).toBe(1);
      await waitUntil(() => Date.now() > first.renewedAt + first.timeoutMs, 10_000, "the first lease to expire");
      const second = await journal.acquireLease(root, liveHolder("second"), { timeoutMs: 60_000 });
      expect(second.epoch).toBe(2);
      expect(await journal.getLease(root)).toMatchObject({ holderId: second.holderId, epoch: 2, timeoutMs: 60_000 });
    });

    test(`${backend.name}: a lease held by a dead local process is taken over at once`, async () => {
      const { journal } = await openIn();
      const proc = Bun.spawn(["true"]);
      await proc.exited;
      const dead: HolderInfo = { holderId: `dead-${proc.pid}` as HolderId, host: hostId(), pid: proc.pid, pidStart: 0 };
      const root = newRunId();
      const held = await journal.acquireLease(root, dead, { timeoutMs: 3_600_000 });
      const taken = await journal.acquireLease(root, liveHolder(), { timeoutMs: 60_000 });
      expect(taken.epoch).toBe(held.epoch + 1);
    });

    test(`${backend.name}: a dead-looking pid under another host identity (same hostname) is not taken at once; under this one it is`, async () => {
      const { journal } = await openIn();
      const proc = Bun.spawn(["true"]);
      await proc.exited;
      // The same hostname on another machine (or boot, or pid namespace): its pid says nothing about that host.
      const [name, ...rest] = hostId().split("/");
      const elsewhere = [name, "another-machine-id", ...rest.slice(1)].join("/");
      expect(elsewhere).not.toBe(hostId());
      const remote = newRunId();
      await journal.acquireLease(remote, { holderId: `far-${proc.pid}` as HolderId, host: elsewhere, pid: proc.pid, pidStart: 0 }, { timeoutMs: 3_600_000 });
      const err = await journal.acquireLease(remote, liveHolder(), { timeoutMs: 60_000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LeaseHeldError);
      expect((err as LeaseHeldError).message).toContain(`far-${proc.pid}, pid ${proc.pid} on ${name}`);
      const local = newRunId();
      const held = await journal.acquireLease(local, { holderId: `near-${proc.pid}` as HolderId, host: hostId(), pid: proc.pid, pidStart: 0 }, { timeoutMs: 3_600_000 });
      expect((await journal.acquireLease(local, liveHolder(), { timeoutMs: 60_000 })).epoch).toBe(held.epoch + 1);
    });

    test(`${backend.name}: a live holder makes acquire refuse, naming the holder`, async () => {
      const { journal } = await openIn();
      const root = newRunId();
      const holder = liveHolder("owner");
      const lease = await journal.acquireLease(root, holder, { timeoutMs: 3_600_000 });
      const err = await journal.acquireLease(root, liveHolder("intruder"), { timeoutMs: 60_000 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(LeaseHeldError);
      expect((err as LeaseHeldError).holder).toEqual({ holderId: holder.holderId, host: hostId(), pid: process.pid });
      expect((err as LeaseHeldError).message).toContain(holder.holderId);

      // A remote holder is never presumed dead.
      const remoteRoot = newRunId();
      await journal.acquireLease(remoteRoot, { ...liveHolder(), host: "elsewhere.example", pid: 999_999 }, { timeoutMs: 3_600_000 });
      expect(await journal.acquireLease(remoteRoot, liveHolder(), { timeoutMs: 1 }).catch((e: unknown) => e)).toBeInstanceOf(
        LeaseHeldError,
      );

      // The same holder re-acquiring keeps its epoch.
      const again = await journal.acquireLease(root, holder, { timeoutMs: 3_600_000 });
      expect(again.epoch).toBe(lease.epoch);
    });

    test(`${backend.name}: release then acquire gives epoch + 1`, async () => {
      const { journal } = await openIn();
      const root = newRunId();
      const holder = liveHolder();
      const lease = await journal.acquireLease(root, holder, { timeoutMs: 3_600_000 });
      await journal.releaseLease(lease);
      expect(await journal.getLease(root)).toBeUndefined();
      const next = await journal.acquireLease(root, liveHolder("next"), { timeoutMs: 60_000 });
      expect(next.epoch).toBe(lease.epoch + 1);
      // The released lease cannot write.
      expect(await journal.append(lease, [started(root, root)]).catch((e: unknown) => e)).toBeInstanceOf(LeaseLostError);
    });

    test(`${backend.name}: requestControl bumps controlRev and clearControl clears it`, async () => {
      const { journal, root, lease } = await withRoot();
      await journal.requestControl(root, "cancel");
      expect(await journal.getRun(root)).toMatchObject({ control: "cancel", controlRev: 1 });
      await journal.requestControl(root, "cancel");
      expect((await journal.getRun(root))?.controlRev).toBe(2);

      await journal.append(lease, [{ runId: root, type: "control_acknowledged", payload: {}, patch: { clearControl: true } }]);
      expect(await journal.getRun(root)).toMatchObject({ control: null, controlRev: 2 });

      await expectCode(journal.requestControl(newRunId(), "cancel"), "run_not_found");
    });

    test(`${backend.name}: listRuns and countRuns filter and page`, async () => {
      const { journal } = await openIn();
      const roots: RunId[] = [];
      const leases: Lease[] = [];
      for (const [i, status] of (["running", "completed", "failed"] as const).entries()) {
        const root = newRunId(1_700_000_000_000 + i * 1000);
        const lease = await journal.acquireLease(root, liveHolder(), { timeoutMs: 60_000 });
        await journal.append(lease, [started(root, root, 1000 * (i + 1))]);
        if (status !== "running") await journal.append(lease, [{ runId: root, type: "status_changed", payload: {}, patch: { status } }]);
        roots.push(root);
        leases.push(lease);
      }
      const [r0, r1, r2] = roots as [RunId, RunId, RunId];
      const children = [newRunId(), newRunId()];
      for (const [i, child] of children.entries()) {
        await journal.append(leases[0] as Lease, [started(child, r0, 5000 + i, { id: r0, depth: 0 })]);
      }

      expect((await journal.listRuns()).map((r) => r.id)).toEqual([r2, r1, r0]);
      expect(await journal.countRuns()).toBe(3);
      expect((await journal.listRuns({ status: "completed" })).map((r) => r.id)).toEqual([r1]);
      expect(await journal.countRuns({ status: "running" })).toBe(1);
      expect(await journal.countRuns({ rootsOnly: false })).toBe(5);
      expect(await journal.countRuns({ rootsOnly: false, status: "running" })).toBe(3);
      const kids = await journal.listRuns({ parentId: r0 });
      expect(kids.map((r) => r.id)).toEqual([...children].reverse());
      expect(kids[0]).toMatchObject({ parentId: r0, rootId: r0, depth: 1, parentKey: "child-1" });
      expect(await journal.countRuns({ parentId: r0 })).toBe(2);
      expect((await journal.listRuns({ limit: 2 })).map((r) => r.id)).toEqual([r2, r1]);
      expect((await journal.listRuns({ limit: 2, offset: 1 })).map((r) => r.id)).toEqual([r1, r0]);
      expect((await journal.listRuns({ offset: 2 })).map((r) => r.id)).toEqual([r0]);
      // What `atomic runs --status a,b --workflow NAME --since WHEN` asks for.
      expect((await journal.listRuns({ statuses: ["completed", "failed"] })).map((r) => r.id)).toEqual([r2, r1]);
      expect(await journal.countRuns({ statuses: [] })).toBe(0);
      expect(await journal.countRuns({ workflowName: "demo" })).toBe(3);
      expect(await journal.countRuns({ workflowName: "other" })).toBe(0);
      expect((await journal.listRuns({ createdSince: 2000 })).map((r) => r.id)).toEqual([r2, r1]);
      expect((await journal.listRuns({ createdSince: 2000, statuses: ["running", "failed"], limit: 1 })).map((r) => r.id)).toEqual([r2]);
    });

    test(`${backend.name}: findRuns matches id prefixes, newest first`, async () => {
      const { journal } = await openIn();
      const ids: RunId[] = [];
      for (let i = 0; i < 3; i++) {
        const id = newRunId(1_700_000_000_000 + i * 86_400_000);
        const lease = await journal.acquireLease(id, liveHolder(), { timeoutMs: 60_000 });
        await journal.append(lease, [started(id, id, 1000 * (i + 1))]);
        ids.push(id);
      }
      const [a, b, c] = ids as [RunId, RunId, RunId];
      expect((await journal.findRuns(b.slice(0, 12), 10)).map((r) => r.id)).toEqual([b]);
      expect((await journal.findRuns(a, 10)).map((r) => r.id)).toEqual([a]);
      expect((await journal.findRuns(a.slice(0, 4), 2)).map((r) => r.id)).toEqual([c, b]);
      expect(await journal.findRuns("zzzz", 10)).toEqual([]);
      expect(await journal.findRuns("%", 10)).toEqual([]);
      expect(await journal.findRuns("_", 10)).toEqual([]);
    });

    test(`${backend.name}: reopening is idempotent and keeps the data`, async () => {
      const { journal, dir, root, lease } = await withRoot();
      await journal.append(lease, [checkpoint(root, 1)]);
      await journal.close();
      open.splice(open.indexOf(journal), 1);
      for (let i = 0; i < 2; i++) {
        const again = await backend.open(dir);
        open.push(again);
        expect(await seqs(again, root)).toEqual([1, 2]);
        expect(await again.getLease(root)).toMatchObject({ holderId: lease.holderId, epoch: lease.epoch });
        await again.close();
        open.pop();
      }
      if (backend.readSchemaVersion) expect(backend.readSchemaVersion(dir)).toBeGreaterThanOrEqual(1);
    });

    testWhen(!!backend.tamperSchemaVersion && !!backend.file)(
      `${backend.name}: a database from a newer version is refused and left untouched`,
      async () => {
        const { journal, dir, root, lease } = await withRoot();
        await journal.append(lease, [checkpoint(root, 1)]);
        await journal.close();
        open.splice(open.indexOf(journal), 1);
        backend.tamperSchemaVersion?.(dir, 999);
        const file = backend.file?.(dir) ?? "";
        const before = readFileSync(file);

        const err = await expectCode(backend.open(dir), "schema_too_new");
        expect(err.message).toContain("999");
        expect(err.message).toContain(file);
        expect(err.hint).toBe("upgrade atomic, or point --home at another directory");

        expect(readFileSync(file).equals(before)).toBe(true);
        expect(backend.readSchemaVersion?.(dir)).toBe(999);
      },
    );

    testWhen(!!backend.file)(`${backend.name}: a file that is not a database is refused`, async () => {
      const dir = makeTempDir();
      const file = backend.file?.(dir) ?? "";
      const text = "these are my grocery notes, not a database\n".repeat(200);
      writeFileSync(file, text);
      const err = await expectCode(backend.open(dir), "storage_corrupt");
      expect(err.message).toBe(`the journal at ${file} is not an atomic database (file is not a database)`);
      expect(err.hint).toBe("move it away or point --home at another directory");
      expect(readFileSync(file, "utf8")).toBe(text);
    });

    testWhen(!!backend.file)(`${backend.name}: storageFault names the file once it is deleted or replaced, and not before`, async () => {
      const { journal, dir } = await withRoot();
      const file = backend.file?.(dir) ?? "";
      expect(journal.storageFault()).toBeUndefined();
      renameSync(file, `${file}.moved`);
      const deleted = journal.storageFault();
      expect([deleted?.code, deleted?.message]).toEqual(["storage_unavailable", `the journal file ${file} was deleted while this process was using it`]);
      writeFileSync(file, "another file");
      expect(journal.storageFault()?.message).toBe(`the journal file ${file} was replaced by another file while this process was using it`);
      rmSync(file);
      renameSync(`${file}.moved`, file);
      expect(journal.storageFault()).toBeUndefined(); // the same file back: all is well again
    });

    test(`${backend.name}: group commit shares transactions between concurrent appends`, async () => {
      const { journal } = await openIn();
      const root = newRunId();
      const lease = await journal.acquireLease(root, liveHolder(), { timeoutMs: 60_000 });
      let calls = 0;
      const counting: Journal = Object.create(journal, {
        append: {
          value: (l: Lease, entries: AppendEntry[]) => {
            calls++;
            return journal.append(l, entries);
          },
        },
      });
      const writer = new GroupCommitWriter(counting, lease);
      const entries = [started(root, root), ...range(1, 199).map((n) => checkpoint(root, n))];
      const outcomes = await Promise.all(entries.map((e) => writer.append(e)));
      expect(outcomes.every((o) => o.status === "appended")).toBe(true);
      expect(outcomes.map((o) => (o.status === "appended" ? o.seq : 0))).toEqual(range(1, 200));
      expect(await seqs(journal, root)).toEqual(range(1, 200));
      expect(calls).toBeLessThan(10);

      // Entries queued while a batch is in flight go in the next one, in order.
      const more = [writer.append(checkpoint(root, 200))];
      await Bun.sleep(0);
      more.push(writer.append(checkpoint(root, 201)));
      await writer.flush();
      expect((await Promise.all(more)).map((o) => o.status)).toEqual(["appended", "appended"]);
      expect(await seqs(journal, root)).toEqual(range(1, 202));
      await writer.close();
      expect(await writer.append(checkpoint(root, 1)).catch((e: unknown) => e)).toBeInstanceOf(Error);
    });

    test(`${backend.name}: group commit rejects a whole batch when the lease is lost`, async () => {
      const { journal, root, lease } = await withRoot();
      await journal.acquireLease(root, liveHolder("thief"), { timeoutMs: 60_000, force: true });
      const writer = new GroupCommitWriter(journal, lease);
      const results = await Promise.allSettled(range(1, 3).map((n) => writer.append(checkpoint(root, n))));
      for (const r of results) {
        expect(r.status).toBe("rejected");
        expect((r as PromiseRejectedResult).reason).toBeInstanceOf(LeaseLostError);
      }
      expect(await seqs(journal, root)).toEqual([1]);
    });

    test(`${backend.name}: replaying 10,000 events reads them all in order`, async () => {
      const { journal, root, lease } = await withRoot();
      const batch: AppendEntry[] = [];
      for (let n = 1; n < 10_000; n++) batch.push(checkpoint(root, n, { payload: { n, text: "output" } }));
      for (let i = 0; i < batch.length; i += 1000) await journal.append(lease, batch.slice(i, i + 1000));
      const events = await journal.readEvents(root);
      expect(events.length).toBe(10_000);
      expect(events.every((e, i) => e.seq === i + 1)).toBe(true);
      expect(events[9_999]?.payload).toEqual({ n: 9_999, text: "output" });
    });
  });
}

describe("openJournal", () => {
  test("a journal URL of another kind is refused, its password hidden", async () => {
    const err = await expectCode(
      openJournal({ home: makeTempDir(), durability: "full", journalUrl: "mysql://u:secret@localhost/db" }),
      "journal_url_unsupported",
    );
    expect(err.message).toBe("unsupported journal URL mysql://u:***@localhost/db");
    expect(err.hint).toBe("use a postgres://user@host:5432/database URL, or omit --journal for the embedded SQLite journal");
  });

  test("a home that cannot be created is storage_readonly", async () => {
    const dir = makeTempDir();
    writeFileSync(join(dir, "file"), "x");
    const err = await expectCode(openJournal({ home: join(dir, "file", "home"), durability: "full" }), "storage_readonly");
    expect(err.hint).toBe("choose a writable --home or ATOMIC_HOME");
  });

  test("creates the home directory readable by its owner only", async () => {
    const home = join(makeTempDir(), "nested", "home");
    const journal = await openJournal({ home, durability: "normal" });
    open.push(journal);
    expect(statSync(home).mode & 0o777).toBe(0o700);
    expect(journal.location).toBe(join(home, "atomic.db"));
  });
});

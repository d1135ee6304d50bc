/**
 * Golden journals (docs/design/conventions.md, Temporal's test-replay): journals recorded by
 * record.ts are committed next to this file. Each is loaded into a fresh
 * journal (SQLite; on Postgres with ATOMIC_TEST_JOURNAL=postgres) through the Journal API (under a lease, with its runs
 * rows, then marked "interrupted") and resumed with the current workflow
 * code through the binary. Replay must return every recorded step without
 * running it again and produce the recorded outputs; an edited copy (a step
 * renamed, arguments changed, or a workflow file asking for another step)
 * must stop with the nondeterminism error naming the position, what the
 * code asks for and what the journal recorded.
 */

import { expect, test } from "bun:test";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { EVENT } from "../../src/engine/journal-events.ts";
import { openJournal } from "../../src/journal/open.ts";
import type { AppendEntry } from "../../src/journal/append.ts";
import type { JournalEvent, RunPatch } from "../../src/journal/runs.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { thisProcessHolder } from "../../src/shared/process-info.ts";
import { ROOT, runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { trackHomes } from "../helpers/homes.ts";
import { journalOf } from "../helpers/postgres.ts";
import { GOLDEN_DIR, HOME_MARK, type GoldenJournal, type GoldenRun } from "./record.ts";

const trackHome = trackHomes();

const GOLDENS: GoldenJournal[] = readdirSync(GOLDEN_DIR)
  .filter((f) => f.endsWith(".journal.json"))
  .sort()
  .map((f) => JSON.parse(readFileSync(join(GOLDEN_DIR, f), "utf8")) as GoldenJournal);

function golden(name: string): GoldenJournal {
  const g = GOLDENS.find((x) => x.name === name);
  if (!g) throw new Error(`no golden journal named ${name} in ${GOLDEN_DIR}`);
  return g;
}

/** A deep copy, changed by `edit` (the "edited copy" of a golden journal). */
function edited(g: GoldenJournal, edit: (copy: GoldenJournal) => void): GoldenJournal {
  const copy = structuredClone(g);
  edit(copy);
  return copy;
}

interface Loaded {
  home: string;
  sideFile: string;
  rootId: RunId;
  /** Per run id: the replay positions the golden checkpointed. */
  recorded: Map<string, Set<string>>;
  /** Per run id: how many events the golden had loaded for it. */
  loadedSeq: Map<string, number>;
  /** Per child run id: its parent and the boundary's position there. */
  parents: Map<string, { parentId: string; parentKey: string }>;
}

/** What the engine's own appends would have set on the runs row with this event. */
function patchFor(e: Omit<JournalEvent, "runId">, run: GoldenRun["run"]): RunPatch | undefined {
  if (e.type === EVENT.runResumed) return { status: "running", endedAt: null, error: null };
  if (e.type !== EVENT.statusChanged) return undefined;
  const p = e.payload as { to: RunPatch["status"]; error?: RunPatch["error"] };
  return {
    status: p.to,
    error: p.error ?? null,
    endedAt: e.at,
    ...(p.to === "completed" ? { outputs: run.outputs } : {}),
  };
}

/**
 * Loads a golden journal into a fresh home: one append batch under a lease
 * (recorded seqs kept, checked by expectedSeq), the root's recorded end
 * left out and the root marked interrupted, then the lease released.
 */
async function load(g: GoldenJournal, workflow = g.workflow): Promise<Loaded> {
  const home = makeTempDir("atomic-golden-");
  trackHome(home);
  const copy = JSON.parse(JSON.stringify(g).replaceAll(HOME_MARK, home)) as GoldenJournal;
  const root = copy.runs[0]!.run;
  expect(root.parentId).toBeNull();
  const recorded = new Map<string, Set<string>>();
  const loadedSeq = new Map<string, number>();
  const parents = new Map<string, { parentId: string; parentKey: string }>();
  const entries: AppendEntry[] = [];
  for (const { run, events } of copy.runs) {
    const isRoot = run.parentId === null;
    if (!isRoot) parents.set(run.id, { parentId: run.parentId!, parentKey: run.parentKey! });
    const last = events.at(-1);
    // The root's own end is what replay must record again.
    const kept = isRoot && last?.type === EVENT.statusChanged ? events.slice(0, -1) : events;
    for (const e of kept) {
      // A recorded cwd of "." is the checkout the journal was recorded in (record.ts): this one.
      const payload = e.type === EVENT.runStarted && (e.payload as { cwd?: string }).cwd === "." ? { ...(e.payload as object), cwd: ROOT } : e.payload;
      const entry: AppendEntry = {
        runId: run.id,
        type: e.type,
        key: e.key,
        payload,
        idempotencyKey: e.idempotencyKey,
        at: e.at,
        expectedSeq: e.seq - 1,
      };
      if (e.seq === 1) {
        entry.newRun = {
          rootId: run.rootId,
          parentId: run.parentId,
          parentKey: run.parentKey,
          depth: run.depth,
          workflowName: run.workflowName,
          workflowPath: isRoot ? resolve(ROOT, workflow) : run.workflowPath,
          workflowDigest: run.workflowDigest,
          inputs: run.inputs,
        };
      }
      const patch = patchFor(e, run);
      if (patch) entry.patch = patch;
      entries.push(entry);
      if (e.type === EVENT.checkpoint && e.key !== null) {
        if (!recorded.has(run.id)) recorded.set(run.id, new Set());
        recorded.get(run.id)!.add(e.key);
      }
    }
    if (isRoot) {
      entries.push({
        runId: run.id,
        type: EVENT.statusChanged,
        payload: { from: "running", to: "interrupted", reason: "golden journal loaded for replay" },
        patch: { status: "interrupted", endedAt: Date.now() },
      });
    }
    loadedSeq.set(run.id, kept.length + (isRoot ? 1 : 0));
  }

  const journal = await openJournal({ home, durability: "full", ...journalOf(home) });
  try {
    const lease = await journal.acquireLease(root.id, thisProcessHolder("golden-loader"), { timeoutMs: 30_000 });
    const outcomes = await journal.append(lease, entries);
    expect(outcomes.filter((o) => o.status !== "appended")).toEqual([]);
    await journal.releaseLease(lease);
    // The loaded rows say what the recorded ones said (the root aside: interrupted now).
    for (const { run } of copy.runs.slice(1)) {
      const row = await journal.getRun(run.id);
      expect({ status: row?.status, outputs: row?.outputs }).toEqual({ status: run.status, outputs: run.outputs });
    }
    expect((await journal.getRun(root.id))?.status).toBe("interrupted");
  } finally {
    await journal.close();
  }
  return { home, sideFile: join(home, "side-effects.txt"), rootId: root.id, recorded, loadedSeq, parents };
}

/** Recorded steps replay reaches: a child whose boundary was checkpointed is not entered at all. */
function reachedCheckpoints(l: Loaded): number {
  const entered = (runId: string): boolean => {
    const p = l.parents.get(runId);
    return !p || (!l.recorded.get(p.parentId)?.has(p.parentKey) && entered(p.parentId));
  };
  let n = 0;
  for (const [runId, positions] of l.recorded) if (entered(runId)) n += positions.size;
  return n;
}

interface EngineLine {
  type: string;
  runId: string;
  position?: string;
  kind?: string;
  replayed?: boolean;
  outputs?: unknown;
}

/** `atomic resume`: with --json the engine events come back parsed; without it, stderr has what a user reads. */
async function resume(l: Loaded, json = true) {
  const r = await runAtomic(["--home", l.home, ...(json ? ["--json"] : []), "resume", l.rootId], {
    home: l.home,
    env: { GOLDEN_SIDE_FILE: l.sideFile },
  });
  const lines = (json ? r.stdout : "")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as EngineLine);
  return { ...r, lines };
}

function sideEffects(file: string): string[] {
  return existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : [];
}

async function readAll(home: string, runIds: Iterable<string>): Promise<Map<string, JournalEvent[]>> {
  const journal = await openJournal({ home, durability: "full", ...journalOf(home) });
  try {
    const out = new Map<string, JournalEvent[]>();
    for (const id of runIds) out.set(id, await journal.readEvents(id as RunId));
    return out;
  } finally {
    await journal.close();
  }
}

async function showJson(home: string, runId: string) {
  const r = await runAtomic(["--home", home, "--json", "show", runId], { home });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as { status: string; run: { outputs: unknown; error: { code: string; message: string } | null } };
}

// ---------------------------------------------------------------------------

test("the golden journals are committed", () => {
  expect(GOLDENS.map((g) => g.name).sort()).toEqual(["basic", "child", "child-in-flight", "patched", "patched-before"]);
  for (const g of GOLDENS) {
    expect(g.format).toBe(1);
    expect(existsSync(resolve(ROOT, g.workflow))).toBe(true);
    expect(g.runs[0]!.events.some((e) => e.type === EVENT.checkpoint)).toBe(true);
  }
});

for (const g of GOLDENS) {
  test(`${g.name}: replays with the current code without re-running a recorded step`, async () => {
    const l = await load(g);
    const r = await resume(l);
    if (r.code !== 0) throw new Error(`resume exited ${r.code}:\n${r.stderr}`);

    // Outputs as recorded.
    const result = r.lines.at(-1)!;
    expect(result.type).toBe("result");
    expect(result.outputs).toEqual(g.outputs);
    expect((await showJson(l.home, l.rootId)).run.outputs).toEqual(g.outputs);

    // Every recorded step came back replayed; none was started.
    const isRecorded = (e: EngineLine) => l.recorded.get(e.runId)?.has(e.position!) === true;
    const ended = r.lines.filter((e) => e.type === "step_ended");
    expect(ended.filter(isRecorded).length).toBe(reachedCheckpoints(l));
    expect(ended.filter((e) => isRecorded(e) && !e.replayed)).toEqual([]);
    expect(r.lines.filter((e) => e.type === "step_started" && isRecorded(e))).toEqual([]);

    // Only steps the golden had not recorded ran: nothing for a complete recording.
    const fresh = ended.filter((e) => !e.replayed && e.kind === "tool").map((e) => `${e.runId}:${e.position}`);
    expect(sideEffects(l.sideFile).sort()).toEqual(fresh.sort());
    if (g.faultPoints === null) {
      expect(fresh).toEqual([]);
      expect(ended.every((e) => e.replayed)).toBe(true);
    } else {
      expect(fresh.length).toBeGreaterThan(0);
    }

    // The journal gained no step record at a recorded position.
    const events = await readAll(l.home, l.loadedSeq.keys());
    for (const [runId, list] of events) {
      const added = list.filter((e) => e.seq > l.loadedSeq.get(runId)!);
      const clash = added.filter(
        (e) => (e.type === EVENT.checkpoint || e.type === EVENT.stepStarted) && l.recorded.get(runId)?.has(e.key ?? ""),
      );
      expect(clash).toEqual([]);
    }
  });

  test(`${g.name}: an edited copy (a recorded step renamed) raises the nondeterminism error`, async () => {
    let position = "";
    let name = "";
    const copy = edited(g, (c) => {
      const first = c.runs[0]!.events.find((e) => e.type === EVENT.checkpoint && (e.payload as { kind: string }).kind === "tool")!;
      const payload = first.payload as { name: string };
      position = first.key!;
      name = payload.name;
      payload.name = `${name}-edited`;
    });
    const l = await load(copy);
    const r = await resume(l, false);
    await expectNondeterminism(l, r, [
      `run ${l.rootId} replayed differently at step ${position}: the workflow now asks for tool "${name}", the journal recorded tool "${name}-edited"`,
    ]);
  });
}

async function expectNondeterminism(l: Loaded, r: Awaited<ReturnType<typeof resume>>, messages: string[]): Promise<void> {
  expect(r.code).toBe(1);
  for (const m of messages) expect(r.stderr).toContain(m);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  expect(r.stdout).not.toContain("completed");
  const shown = await showJson(l.home, l.rootId);
  expect(shown.status).toBe("failed");
  expect(shown.run.error?.code).toBe("nondeterminism");
  // Nothing ran: the error stops the run before any new step.
  expect(sideEffects(l.sideFile)).toEqual([]);
}

test("child: a copy with the child's inputs digest edited raises the nondeterminism error", async () => {
  const g = golden("child");
  const copy = edited(g, (c) => {
    const boundary = c.runs[0]!.events.find((e) => e.type === EVENT.checkpoint && (e.payload as { kind: string }).kind === "child")!;
    (boundary.payload as { args: string }).args = "edited";
  });
  const l = await load(copy);
  const r = await resume(l, false);
  const boundary = g.runs[0]!.events.find((e) => e.type === EVENT.checkpoint && (e.payload as { kind: string }).kind === "child")!;
  const args = (boundary.payload as { args: string }).args;
  await expectNondeterminism(l, r, [
    `replayed differently at step ${boundary.key}: the workflow now asks for child "worker-alpha" with arguments digest ${args}, the journal recorded child "worker-alpha" with arguments digest edited`,
  ]);
});

test("child-in-flight: a copy with a child step's arguments edited fails the replayed child with the nondeterminism error", async () => {
  const g = golden("child-in-flight");
  const childRun = g.runs[1]!.run;
  const copy = edited(g, (c) => {
    const prepare = c.runs[1]!.events.find((e) => e.type === EVENT.checkpoint && (e.payload as { name: string }).name === "prepare")!;
    (prepare.payload as { args: string }).args = "edited";
  });
  const l = await load(copy);
  const r = await resume(l, false);
  await expectNondeterminism(l, r, [`run ${childRun.id} replayed differently at step 0: the workflow now asks for tool "prepare" with arguments digest`]);
  expect(r.stderr).toContain(`the journal recorded tool "prepare" with arguments digest edited`);
  const child = await showJson(l.home, childRun.id);
  expect(child.status).toBe("failed");
  expect(child.run.error?.code).toBe("nondeterminism");
});

test("basic: a changed workflow file asking for another step at a recorded position raises the nondeterminism error", async () => {
  const l = await load(golden("basic"), "test/golden/workflows/basic-changed.ts");
  const r = await resume(l, false);
  expect(r.stderr).toContain("the workflow file changed since this run started");
  await expectNondeterminism(l, r, [
    `run ${l.rootId} replayed differently at step 2.1.0: the workflow now asks for tool "rate", the journal recorded tool "score"`,
  ]);
});

// ctx.patched / ctx.deprecatePatch (issue 26): each case replays a committed history.

test("patched-before: history recorded without the marker replays the old branch of patched.ts (ctx.patched is false), nothing re-run", async () => {
  const g = golden("patched-before");
  const l = await load(g, "test/golden/workflows/patched.ts");
  const r = await resume(l);
  if (r.code !== 0) throw new Error(`resume exited ${r.code}:\n${r.stderr}`);
  expect(r.lines.at(-1)!.outputs).toEqual({ path: "old", summary: "NOTES ON PATCHES" });
  expect(sideEffects(l.sideFile)).toEqual([]);
  // Replaying history records no marker.
  const events = (await readAll(l.home, [l.rootId])).get(l.rootId)!;
  expect(events.filter((e) => e.type === EVENT.patchRecorded)).toEqual([]);
});

test("patched: history holding the marker replays the new branch, of patched.ts and of patched-deprecated.ts (ctx.deprecatePatch)", async () => {
  const g = golden("patched");
  expect(g.outputs).toEqual({ path: "new", summary: "DEEP NOTES ON PATCHES" });
  for (const workflow of ["test/golden/workflows/patched.ts", "test/golden/workflows/patched-deprecated.ts"]) {
    const l = await load(g, workflow);
    const r = await resume(l);
    if (r.code !== 0) throw new Error(`${workflow}: resume exited ${r.code}:\n${r.stderr}`);
    expect(r.lines.at(-1)!.outputs).toEqual(g.outputs);
    expect(sideEffects(l.sideFile)).toEqual([]);
    // The marker is recorded once: replay adds none.
    const events = (await readAll(l.home, [l.rootId])).get(l.rootId)!;
    expect(events.filter((e) => e.type === EVENT.patchRecorded).length).toBe(1);
  }
});

test("patched: a copy without its marker replayed against patched.ts takes the old branch and diverges at the new branch's step", async () => {
  const copy = edited(golden("patched"), (c) => {
    c.runs[0]!.events = c.runs[0]!.events.filter((e) => e.type !== EVENT.patchRecorded).map((e, i) => ({ ...e, seq: i + 1 }));
  });
  const l = await load(copy, "test/golden/workflows/patched.ts");
  const r = await resume(l, false);
  await expectNondeterminism(l, r, [`run ${l.rootId} replayed differently at step 0: the workflow now asks for tool "fetch", the journal recorded tool "fetch-v2"`]);
});

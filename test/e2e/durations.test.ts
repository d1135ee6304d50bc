/**
 * Durations that stop (issue 13 item 7), through the real binary: a stage
 * of an interrupted or crashed run keeps the end it had when the run stopped
 * (in `show` and in the status API the page reads), a paused run's
 * duration goes on in `runs`, and a crashed run keeps one reason for as
 * long as it is crashed. No duration is asserted: ends are compared with
 * themselves later, and a paused run's duration with the wall clock.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { openJournal } from "../../src/journal/open.ts";
import { statusFixture } from "../status/support.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, listRuns, makeTempDir, stagePid, startedRunId } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const WAITS = fixture("waits.ts");

async function startWaiting(home: string, extraArgs: string[] = []) {
  const dir = makeTempDir();
  const proc = spawnAtomic(["run", WAITS, ...extraArgs], { home, env: { E2E_DIR: dir } });
  const out = lineWatcher(proc.stdout);
  const id = startedRunId(await out.waitFor(/^started run /));
  await stagePid(dir, "wait");
  await out.waitFor(/stage wait started/);
  return { proc, id };
}

async function waitStep(home: string, id: string): Promise<Record<string, any>> {
  const r = await runAtomic(["show", id, "--json"], { home });
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout).steps.find((s: Record<string, any>) => s.name === "wait");
}

/** The stage's end as the page's data has it (the run detail's graph node). */
async function apiEnd(home: string, id: string): Promise<number | null> {
  const journal = await openJournal({ home, durability: "full" });
  const st = statusFixture(journal);
  try {
    const detail = (await (await st.req(`/api/runs/${id}`)).json()) as Record<string, any>;
    const find = (b: Record<string, any>): Record<string, any> | undefined =>
      b.type === "node" ? (b.node.name === "wait" ? b.node : undefined) : (b.items ?? b.branches).map(find).find(Boolean);
    return find(detail.graph.root)?.endedAt ?? null;
  } finally {
    await st.close();
    await journal.close();
  }
}

/** Seconds in a DURATION cell ("850ms", "3.2s", "1m 05s"). */
function seconds(cell: string): number {
  const m = /^(?:(\d+)m\s*)?(\d+(?:\.\d+)?)(ms|s)$/.exec(cell.trim());
  if (!m) throw new Error(`not a duration: ${cell}`);
  return Number(m[1] ?? 0) * 60 + Number(m[2]) / (m[3] === "ms" ? 1000 : 1);
}

e2eTest("an interrupted run's stopped stage keeps the end it had, in show and in the page's data", async () => {
  const home = makeTempDir();
  const { proc, id } = await startWaiting(home);
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(130);
  const first = await waitStep(home, id);
  expect(first.status).toBe("stopped");
  expect(first.endedAt).not.toBeNull();
  expect(first.attemptLog.at(-1).endedAt).toBe(first.endedAt);
  const firstApi = await apiEnd(home, id);
  expect(firstApi).toBe(first.endedAt);
  const shown = (await runAtomic(["show", id], { home })).stdout.split("\n").find((l) => /stopped\s+wait /.test(l));
  // later: the same end, the same line
  const marker = Date.now();
  await waitUntil(() => Date.now() > marker + 1_100, 5_000, "a second to pass");
  expect((await waitStep(home, id)).endedAt).toBe(first.endedAt);
  expect(await apiEnd(home, id)).toBe(first.endedAt);
  expect((await runAtomic(["show", id], { home })).stdout.split("\n").find((l) => /stopped\s+wait /.test(l))).toBe(shown);
});

e2eTest("a crashed run keeps one reason and its stages an end; a paused run's duration goes on", async () => {
  const home = makeTempDir();
  const crashed = await startWaiting(home, ["--lease-ms", "1500"]);
  crashed.proc.kill("SIGKILL");
  await crashed.proc.exited;
  const listed = () => listRuns(home).then((rs) => rs.find((r) => r.id === crashed.id)!);
  const before = await listed();
  expect(before.status).toBe("crashed");
  const runsLine = async () => (await runAtomic(["runs"], { home })).stdout.split("\n").find((l) => l.startsWith(crashed.id))!;
  expect(await runsLine()).toContain("driver process gone");
  const step = await waitStep(home, crashed.id);
  expect(step.status).toBe("stopped");
  expect(step.endedAt).not.toBeNull();
  // past its lease's expiry the reason is the same (not "lease expired" now)
  await waitUntil(() => Date.now() > (before.leaseExpiresAt as number) + 200, 10_000, "the lease to expire");
  expect(await runsLine()).toContain("driver process gone");
  expect(await listed()).toMatchObject({ status: "crashed", crashCause: "driver_gone" });
  expect((await runAtomic(["show", crashed.id], { home })).stdout).toContain("its driver process is gone");
  expect((await waitStep(home, crashed.id)).endedAt).toBe(step.endedAt);

  // paused: still live, so its duration runs on past the pause
  const paused = await startWaiting(home);
  expect((await runAtomic(["pause", paused.id], { home })).code).toBe(0);
  const pausedAt = Date.now();
  await waitUntil(() => Date.now() > pausedAt + 2_500, 5_000, "time to pass while paused");
  const lines = (await runAtomic(["runs"], { home })).stdout.split("\n");
  const header = lines[0]!;
  const line = lines.find((l) => l.startsWith(paused.id))!;
  expect(line).toMatch(/\bpaused\b/);
  const col = header.indexOf("DURATION");
  const cell = line.slice(col).trim().split(/\s{2,}/)[0]!;
  const createdAt = (await listRuns(home)).find((r) => r.id === paused.id)!.createdAt as number;
  expect(seconds(cell)).toBeGreaterThanOrEqual(Math.floor((pausedAt + 2_500 - createdAt) / 1000) - 0.5);
  paused.proc.kill("SIGKILL");
});

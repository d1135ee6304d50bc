/**
 * No stage outlives its run's processes (issue 12, item 8), through the
 * binary: the root, its coordinator and its workers are killed at once
 * (kill -9 of their process group) mid fan-out. The stages' process groups
 * die with their workers, and so does a process that left its group (setsid)
 * but kept its environment: the workers' group guards find them by the token
 * in it. One that left its group and dropped the token is ended by `atomic
 * resume` before it starts the stages again (by the run id), so no stage
 * ever has two copies alive; and when the resumed drive is over, no process
 * of the run is left.
 *
 * Processes are told apart by the environment they inherit:
 * ATOMIC_ROOT_RUN_ID (the run), ATOMIC_STAGE and ATOMIC_ATTEMPT (which copy).
 */

import { expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { atomicBin, environment, lineWatcher, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { trackHomes } from "../helpers/homes.ts";
import { processEnvironments } from "../helpers/processes.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "orphans.ts");
const STAGES = ["s1", "s2", "s3"];
const trackHome = trackHomes();

function lines(file: string): string[] {
  return existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : [];
}

/** The run's live processes, as [stage, attempt] pairs (a process without a stage is a pool process). */
function runProcesses(runId: string): { pid: number; stage?: string; attempt?: string }[] {
  return processEnvironments("ATOMIC_ROOT_RUN_ID", runId).map(({ pid, env }) => ({ pid, stage: env.ATOMIC_STAGE, attempt: env.ATOMIC_ATTEMPT }));
}

function commandOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ").trim().slice(0, 120);
  } catch {
    return "(gone)";
  }
}

/** Per stage, the attempts that have a live process. */
function copies(runId: string): Record<string, string[]> {
  const out: Record<string, Set<string>> = {};
  for (const p of runProcesses(runId)) if (p.stage) (out[p.stage] ??= new Set()).add(p.attempt ?? "?");
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, [...v].sort()]));
}

test("kill -9 of the whole process group mid fan-out, then resume: never two copies of a stage, nothing of the run left", async () => {
  const home = makeTempDir("atomic-orphans-");
  trackHome(home);
  const side = join(home, "side");
  const gate = join(home, "gate");
  // A process group of its own (detached: setsid), as a terminal gives a foreground job; the environment the
  // resume below gets too (spawnAtomic), so both use the same journal (the Postgres pass: a schema of the cluster).
  const root = Bun.spawn([atomicBin(), "run", FIXTURE, "--input", `side=${side}`, "--input", `gate=${gate}`, "--workers", "3", "--json"], {
    env: environment({ home }),
    stdin: "ignore",
    stdout: "pipe",
    stderr: "ignore",
    detached: true,
  });
  let runId = "";
  try {
    const out = lineWatcher(root.stdout);
    runId = (JSON.parse(await out.waitFor(/"runId"/)) as { runId: string }).runId;
    await waitUntil(() => STAGES.every((n) => lines(side).includes(`${n}:1:start`)), 30_000, "the fan-out's stages to run");
    await waitUntil(
      () => copies(runId).s1?.length === 1 && runProcesses(runId).filter((p) => p.stage === "s1").length >= 3 && runProcesses(runId).filter((p) => p.stage === "s2").length >= 3,
      10_000,
      "s1 and s2 and their escaped processes",
    );

    process.kill(-root.pid, "SIGKILL");
    await root.exited;
    // The groups went with their workers, and s2's process that left its group: only s1's, which dropped the token too, is still there.
    await waitUntil(() => runProcesses(runId).every((p) => p.stage === "s1" && p.attempt === "1") && runProcesses(runId).length > 0, 10_000, "the stages' groups to die with their workers").catch((err: unknown) => {
      // What was left, so a failure says which process survived its worker (or that s1's escaped one did not).
      const left = runProcesses(runId).map((p) => `${p.pid} ${p.stage ?? "(pool)"}:${p.attempt ?? "-"} ${commandOf(p.pid)}`);
      throw new Error(`${(err as Error).message}; left: ${left.join(" | ") || "nothing"}`);
    });
    const escaped = runProcesses(runId);
    expect(escaped.length).toBeGreaterThan(0);

    const resume = spawnAtomic(["resume", runId, "--workers", "3", "--json"], { home });
    const resumed = Promise.all([new Response(resume.stdout).text(), new Response(resume.stderr).text(), resume.exited]);
    // While the resumed stages start and run: at most one copy of each stage is alive, at every look.
    const seen: Record<string, string[]>[] = [];
    await waitUntil(() => {
      seen.push(copies(runId));
      return STAGES.every((n) => lines(side).includes(`${n}:2:start`));
    }, 30_000, "the resumed stages to run").catch(async (err: unknown) => {
      // What the resume said, so a failure shows whether it refused, failed or was still starting.
      resume.kill("SIGKILL");
      const [o, e, c] = await resumed;
      throw new Error(`${(err as Error).message}; side file: ${lines(side).join(" ")}; resume exit ${c}, stdout: ${o.slice(-1500)} stderr: ${e.slice(-1500)}`);
    });
    seen.push(copies(runId));
    for (const look of seen) for (const n of STAGES) expect(look[n]?.length ?? 0).toBeLessThanOrEqual(1);
    expect(seen.at(-1)).toEqual({ s1: ["2"], s2: ["2"], s3: ["2"] });
    for (const p of escaped) expect(runProcesses(runId).some((q) => q.pid === p.pid)).toBe(false);

    writeFileSync(gate, "");
    const [stdout, stderr, code] = await resumed;
    expect(stderr).toBe("");
    expect(code).toBe(0);
    expect(JSON.parse(stdout.trim().split("\n").pop()!).outputs).toEqual({ texts: ["out-s1", "out-s2", "out-s3"] });
    // The resumed s1's escaped process too: nothing of the run outlives its drive.
    await waitUntil(() => runProcesses(runId).length === 0, 10_000, "no process of the run to be left");
  } finally {
    try {
      process.kill(-root.pid, "SIGKILL");
    } catch {
      // already gone
    }
    if (runId) for (const p of runProcesses(runId)) process.kill(p.pid, "SIGKILL");
  }
});

/**
 * Split brain (issue 12, item 6), through the binary: a root stopped
 * (SIGSTOP) past its lease while its pool runs stages, a resume from
 * another process, then SIGCONT of the first. The stopped root's pool goes
 * down by itself once the root's lease expired (the coordinator watches
 * it), the first root, woken, performs no side effect (every tool call and
 * every stage marker after the takeover is the resume's), and exits
 * resumably (130), naming the process that drives the run now. The run
 * completes once, with the outputs of an uninterrupted run, and no process
 * of it is left.
 *
 * Side effects are counted in one file (fixtures/split-brain.ts). Nothing
 * here asserts a duration.
 */

import { expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { trackHomes } from "../helpers/homes.ts";
import { processesWithEnv } from "../helpers/processes.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "split-brain.ts");
const trackHome = trackHomes();

function lines(file: string): string[] {
  return existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : [];
}

function setup(name: string) {
  const home = makeTempDir(`atomic-${name}-`);
  trackHome(home);
  const side = join(home, "side-effects.txt");
  const gate = join(home, "gate");
  return { home, side, gate, args: ["run", FIXTURE, "--input", `side=${side}`, "--input", `gate=${gate}`] };
}

test("a root stopped past its lease, resumed elsewhere, then continued: it does nothing more and exits resumably with its pool gone", async () => {
  const uninterrupted = setup("split-ref");
  writeFileSync(uninterrupted.gate, "");
  const ref = await runAtomic([...uninterrupted.args, "--json"], { home: uninterrupted.home });
  expect(ref.code).toBe(0);
  const expected = JSON.parse(ref.stdout.trim().split("\n").pop()!).outputs;

  const s = setup("split");
  const first = spawnAtomic([...s.args, "--lease-ms", "1000", "--workers", "3", "--json"], { home: s.home });
  const firstErr = new Response(first.stderr).text();
  // Its output line by line: the run's id (its first line) is needed while it is stopped.
  const firstOut = lineWatcher(first.stdout);
  const runId = (JSON.parse(await firstOut.waitFor(/"runId"/)) as { runId: string }).runId;
  await waitUntil(() => ["s1", "s2", "s3"].every((n) => lines(s.side).includes(`stage:${n}:1:start`)), 30_000, "the fan-out's stages to run");
  process.kill(first.pid, "SIGSTOP");
  try {
    // Its lease expires; its pool sees that and goes, stages and all (only the stopped root is left of it).
    await waitUntil(() => {
      const left = processesWithEnv("ATOMIC_HOME", s.home);
      return left.length === 1 && left[0] === first.pid;
    }, 30_000, "the stopped root's pool to go down");
    const beforeTakeover = lines(s.side).length;

    // The resume takes over and runs the fan-out again (its stages wait at the gate)...
    const resume = spawnAtomic(["resume", "--json", "--workers", "3", runId], { home: s.home });
    const resumed = Promise.all([new Response(resume.stdout).text(), new Response(resume.stderr).text(), resume.exited]);
    await waitUntil(() => ["s1", "s2", "s3"].every((n) => lines(s.side).includes(`stage:${n}:2:start`)), 30_000, "the resumed stages to run");
    // ... while the first root wakes: it stops, naming the resume.
    process.kill(first.pid, "SIGCONT");
    expect(await first.exited).toBe(130);
    const result = JSON.parse(await firstOut.waitFor(/^\{"type":"result"/));
    expect(result.status).toBe("interrupted");
    expect(result.error.code).toBe("lease_lost");
    expect(result.error.message).toMatch(new RegExp(`another process drives it now \\(root-\\S+, pid ${resume.pid} on `));
    expect(await firstErr).not.toMatch(/^\s+at /m);
    const whenFirstExited = lines(s.side);

    writeFileSync(s.gate, "");
    const [resumeOut, resumeErr, resumeCode] = await resumed;
    expect(resumeErr).toBe("");
    expect(resumeCode).toBe(0);
    expect(JSON.parse(resumeOut.trim().split("\n").pop()!).outputs).toEqual(expected);

    // Nothing of the first drive after the takeover, not even once it was woken.
    const all = lines(s.side);
    expect(all.slice(0, whenFirstExited.length)).toEqual(whenFirstExited);
    const afterTakeover = all.slice(beforeTakeover);
    expect(afterTakeover.filter((l) => l.includes(`root=${first.pid}`) || /^stage:\w+:1:/.test(l))).toEqual([]);
    // The run completed once: each effect of the rest of the run exactly once.
    for (const n of ["s1", "s2", "s3"]) expect(all.filter((l) => l.startsWith(`stage:${n}:`) && l.endsWith(":end"))).toEqual([`stage:${n}:2:end`]);
    expect(all.filter((l) => l.startsWith("tool:after"))).toEqual([`tool:after root=${resume.pid}`]);
    expect(all.filter((l) => l.startsWith("tool:before"))).toEqual([`tool:before root=${first.pid}`]);
    expect(all.filter((l) => l.startsWith("stage:last:"))).toHaveLength(1);
    expect(processesWithEnv("ATOMIC_HOME", s.home)).toEqual([]);
  } finally {
    try {
      process.kill(first.pid, "SIGCONT");
    } catch {
      // already gone
    }
  }
});

/**
 * Two processes can never both drive one run (docs/design/journal.md): the
 * lease decides, and the loser exits 2 with one clear sentence naming the
 * holder (its pid and host), never a stack trace.
 *
 * The fixture (fixtures/gated.ts) holds its driver at a gate until the test
 * creates a file, so the winner is provably alive while the loser tries.
 */

import { expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { openJournal } from "../../src/journal/open.ts";
import type { RunId } from "../../src/shared/ids.ts";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { trackHomes } from "../helpers/homes.ts";
import { journalOf } from "../helpers/postgres.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "gated.ts");
const trackHome = trackHomes();

interface Setup {
  home: string;
  sideFile: string;
  gateFile: string;
}

function setup(): Setup {
  const home = makeTempDir("atomic-double-resume-");
  trackHome(home);
  return { home, sideFile: join(home, "side-effects.txt"), gateFile: join(home, "gate") };
}

function start(s: Setup, args: string[], env: Record<string, string> = {}): Subprocess<"pipe", "pipe", "pipe"> {
  return spawnAtomic(["--home", s.home, ...args], { home: s.home, env });
}

function runArgs(s: Setup): string[] {
  return ["run", FIXTURE, "--input", `sideFile=${s.sideFile}`, "--input", `gateFile=${s.gateFile}`];
}

async function finished(proc: Subprocess<"pipe", "pipe", "pipe">) {
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  return { code, stdout, stderr };
}

/** The refusal: one sentence naming the holder, a hint, no stack trace. */
function expectRefusal(r: { code: number; stdout: string; stderr: string }, runId: string, holderPid: number): void {
  expect(r.code).toBe(2);
  const lines = r.stderr.trimEnd().split("\n");
  const host = hostname().replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  expect(lines[0]).toMatch(new RegExp(`^error: run ${runId} is being driven by another process \\(\\S+, pid ${holderPid} on ${host}\\)\\.$`));
  expect(lines.filter((l) => l.startsWith("error:"))).toHaveLength(1);
  expect(lines.slice(1).every((l) => l.startsWith("hint:"))).toBe(true);
  expect(r.stderr).not.toMatch(/^\s+at /m);
  expect(r.stdout).toBe("");
}

async function runEvents(home: string, runId: string) {
  const journal = await openJournal({ home, durability: "full", ...journalOf(home) });
  try {
    return await journal.readEvents(runId as RunId);
  } finally {
    await journal.close();
  }
}

function sideEffects(file: string): string[] {
  return existsSync(file) ? readFileSync(file, "utf8").split("\n").filter(Boolean) : [];
}

test("two resumes of a crashed run at once: exactly one proceeds, the other names it", async () => {
  const s = setup();
  // Crash: killed between step "b"'s end and its checkpoint.
  const crashed = await finished(start(s, ["--json", ...runArgs(s)], { ATOMIC_FAULT_POINTS: "before-checkpoint:2" }));
  expect(crashed.code).toBe(137);
  const runId = (JSON.parse(crashed.stdout.split("\n")[0]!) as { runId: string }).runId;

  const resumes = [start(s, ["resume", runId]), start(s, ["resume", runId])];
  const outs = resumes.map((p) => lineWatcher(p.stdout));
  const errs = resumes.map((p) => new Response(p.stderr).text());
  // The loser exits first: the winner is held at the gate.
  const loserIndex = await Promise.race(resumes.map((p, i) => p.exited.then(() => i)));
  const loser = resumes[loserIndex]!;
  const winner = resumes[1 - loserIndex]!;
  await outs[1 - loserIndex]!.waitFor(/waiting at the gate/);
  expect(winner.exitCode).toBeNull();

  const loserOut = await Promise.all([loser.exited, errs[loserIndex]!]);
  expectRefusal({ code: loserOut[0], stdout: outs[loserIndex]!.text(), stderr: loserOut[1] }, runId, winner.pid);

  // The holder `show` reports is the winner.
  const shown = await runAtomic(["--home", s.home, "--json", "show", runId], { home: s.home });
  const report = JSON.parse(shown.stdout) as { status: string; holder?: { pid: number; holderId: string } };
  expect(report.status).toBe("running");
  expect(report.holder?.pid).toBe(winner.pid);
  expect(loserOut[1]).toContain(report.holder!.holderId);

  writeFileSync(s.gateFile, "");
  expect(await winner.exited).toBe(0);
  expect(await errs[1 - loserIndex]!).toBe("");

  // Only the winner wrote: one run_resumed, by its pid; each step ran once,
  // except "b", in flight at the crash.
  const events = await runEvents(s.home, runId);
  const resumed = events.filter((e) => e.type === "run_resumed");
  expect(resumed).toHaveLength(1);
  expect((resumed[0]!.payload as { pid: number }).pid).toBe(winner.pid);
  expect(sideEffects(s.sideFile)).toEqual([`${runId}:0`, `${runId}:1`, `${runId}:1`, `${runId}:2`, `${runId}:3`]);
  const done = await runAtomic(["--home", s.home, "--json", "show", runId], { home: s.home });
  expect((JSON.parse(done.stdout) as { run: { outputs: unknown } }).run.outputs).toEqual({ sum: 6 });
});

test("resume while the original run is alive is refused, naming it", async () => {
  const s = setup();
  const original = start(s, runArgs(s));
  const out = lineWatcher(original.stdout);
  const started = await out.waitFor(/^started run /);
  const runId = /^started run (\S+)/.exec(started)![1]!;
  await out.waitFor(/waiting at the gate/);

  const refused = await runAtomic(["--home", s.home, "resume", runId], { home: s.home });
  expectRefusal(refused, runId, original.pid);
  expect(original.exitCode).toBeNull();

  writeFileSync(s.gateFile, "");
  expect(await original.exited).toBe(0);
  const events = await runEvents(s.home, runId);
  expect(events.filter((e) => e.type === "run_resumed")).toHaveLength(0);
  expect(sideEffects(s.sideFile)).toHaveLength(4);
});

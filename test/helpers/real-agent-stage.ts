/**
 * A real agent CLI as an atomic stage, for the real-CLI test files: a fake
 * provider per test (closed after the file), the CLI's isolated home
 * (agent-homes.ts), the stage run through dist/atomic with the
 * fixtures/real-agent.ts workflow (a failure is returned in its outputs,
 * not thrown), and `sendMidTurn` for `atomic send` while the CLI's first
 * model call is in flight.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { cleanupNow, cleanupWhenIdle } from "../e2e/support.ts";
import { inputsFile, type AgentHome } from "./agent-homes.ts";
import { lineWatcher, runAtomic, spawnAtomic, untilEvent, waitUntil } from "./atomic.ts";
import { AGENT_STEP_LIMIT_MS, AGENT_TEST_LIMIT_MS } from "./agents.ts";
import type { FakeProvider } from "./fake-provider.ts";
import { pidsRunning } from "./processes.ts";

const WORKFLOW = join(import.meta.dir, "..", "runners", "fixtures", "real-agent.ts");

export type Outputs = { text: string; structured: unknown; usage: Record<string, unknown> | null; status: string; error: { code: string; message: string } | null; sessionId: string | null };

export interface RealStage<R> {
  fake: FakeProvider<R>;
  h: AgentHome;
  /** The stage's cwd. */
  cwd: string;
  /** The workflow's inputs every run of this stage gets (runner, model). */
  defaults: Record<string, unknown>;
}

/** Registers the file's cleanup; the returned function starts a fake with `replies` queued and an isolated home. */
export function realStages<R>(start: () => Promise<FakeProvider<R>>, home: (fake: FakeProvider<R>) => AgentHome, defaults: Record<string, unknown>) {
  const fakes: FakeProvider<R>[] = [];
  afterEach(cleanupWhenIdle);
  afterAll(async () => {
    await cleanupNow();
    await Promise.all(fakes.map((f) => f.close()));
  });
  return async (...replies: R[]): Promise<RealStage<R>> => {
    const fake = await start();
    fakes.push(fake);
    fake.push(...replies);
    const h = home(fake);
    const cwd = join(h.dir, "work");
    mkdirSync(cwd);
    return { fake, h, cwd, defaults };
  };
}

function runArgs(s: RealStage<unknown>, inputs: Record<string, unknown>): string[] {
  return ["run", WORKFLOW, "--json", "--workers", "1", "--inputs-json", inputsFile(s.h, { ...s.defaults, ...inputs })];
}

export async function runStage(s: RealStage<any>, inputs: Record<string, unknown>): Promise<{ runId: string; outputs: Outputs; stderr: string }> {
  const r = await runAtomic(runArgs(s, inputs), { home: s.h.home, cwd: s.cwd, env: s.h.env, timeoutMs: AGENT_TEST_LIMIT_MS });
  const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
  return { runId: result.runId, outputs: result.outputs, stderr: r.stderr };
}

/** Starts the stage's run (for tests that signal or cancel it). */
export async function startStage(s: RealStage<any>, inputs: Record<string, unknown>, extra: string[] = []) {
  const proc = spawnAtomic([...runArgs(s, inputs), ...extra], { home: s.h.home, cwd: s.cwd, env: s.h.env });
  const out = lineWatcher(proc.stdout);
  const runId = JSON.parse(await out.waitFor(/"type":"run_started"/, AGENT_STEP_LIMIT_MS)).runId as string;
  return { proc, out, runId };
}

/**
 * Cancels a run (`atomic cancel`, or Ctrl-C of `atomic run`) while the CLI's
 * shell tool runs a `sleep` of its own length (codex runs tools in a pid
 * namespace, so the sleep is found by its command line, not by `$!`); every
 * process of the tool must end, after a SIGTERM (the tool's shell notes it)
 * and not only a SIGKILL (`toolSeesTerm`: codex gets the SIGTERM, but its
 * tool lives in codex's pid namespace and ends with it by the kernel's
 * SIGKILL). `toolCall(command)` is the fake's reply that runs it.
 */
export async function cancelDuringTool<R>(s: RealStage<R>, toolCall: (command: string) => R, how: "cancel" | "SIGINT", toolSeesTerm = true): Promise<void> {
  const sleep = ["sleep", String(600 + Math.floor(Math.random() * 100_000))];
  const started = join(s.cwd, "started");
  const termed = join(s.cwd, "termed");
  s.fake.push(toolCall(`trap ': > ${termed}' TERM; ${sleep.join(" ")} & touch ${started}; wait; wait`));
  const { proc, out, runId } = await startStage(s, { prompt: "work" }, ["--workers", "1"]);
  const describe = describeRun(proc, out, s.fake);
  await untilEvent(waitUntil(() => existsSync(started) && pidsRunning(sleep).length > 0, AGENT_STEP_LIMIT_MS, "the tool to start"), "the tool to start", { proc, limitMs: AGENT_STEP_LIMIT_MS, describe });
  if (how === "cancel") expect((await runAtomic(["cancel", runId], { home: s.h.home, env: s.h.env })).code).toBe(0);
  else proc.kill("SIGINT");
  await proc.exited;
  await waitUntil(() => pidsRunning(sleep).length === 0, AGENT_STEP_LIMIT_MS, "the tool's sleep to end");
  if (toolSeesTerm) expect(existsSync(termed)).toBe(true);
}

/**
 * For a failure message while a run goes on (untilEvent's `describe`): the end of the run's stdout (its outputs, once
 * it ended) and stderr, and every request the fake provider got. Call it right after the run started (it reads stderr).
 */
export function describeRun(proc: { stderr: ReadableStream<Uint8Array> }, out: { lines: string[] }, fake: { describe(): string }): () => string {
  const stderr = lineWatcher(proc.stderr);
  return () => `the run's stdout ends:\n${out.lines.slice(-8).join("\n")}\nits stderr ends:\n${stderr.lines.slice(-15).join("\n")}\n${fake.describe()}`;
}

/** Runs the stage, sends `text` with `mode` once the CLI's first model call arrived, then `afterSend()`; the run must end well. */
/** `sendArgs`: more arguments of `atomic send` (--attach FILE). The outputs carry the run's id. */
export async function sendMidTurn(s: RealStage<any>, inputs: Record<string, unknown>, text: string, mode: "followUp" | "steer" | "interrupt", afterSend = () => {}, sendArgs: string[] = []): Promise<Outputs & { runId: string }> {
  const proc = spawnAtomic(runArgs(s, inputs), { home: s.h.home, cwd: s.cwd, env: s.h.env });
  const out = lineWatcher(proc.stdout);
  const started = JSON.parse(await out.waitFor(/"type":"run_started"/, AGENT_STEP_LIMIT_MS));
  await untilEvent(s.fake.callMatching(), "the CLI's first model call", { proc, limitMs: AGENT_STEP_LIMIT_MS, describe: describeRun(proc, out, s.fake) });
  expect((await runAtomic(["send", started.runId, "ask", text, "--mode", mode, ...sendArgs], { home: s.h.home, env: s.h.env, cwd: s.cwd })).code).toBe(0);
  afterSend();
  expect(await proc.exited).toBe(0);
  return { ...(JSON.parse(out.lines.at(-1)!).outputs as Outputs), runId: started.runId as string };
}

/** A run's stage as a user sees it: `atomic show` (text) and the stage's transcript.md (and the artifact directory it is in). */
export async function shownStage(home: string, env: Record<string, string>, runId: string, name: string): Promise<{ show: string; transcript: string; dir: string }> {
  const show = (await runAtomic(["show", runId], { home, env })).stdout;
  const report = JSON.parse((await runAtomic(["show", runId, "--json"], { home, env })).stdout);
  const step = report.steps.find((x: { name: string }) => x.name === name);
  return { show, transcript: readFileSync(join(step.artifactDir, "transcript.md"), "utf8"), dir: step.artifactDir };
}

/**
 * Helpers of the builtin workflows' end-to-end tests: a fake OpenAI server
 * whose answers are chosen per stage (the stage is told by the first words
 * of its prompt), requests counted per stage, a run through dist/atomic
 * with `--json`, and a run SIGKILLed while a chosen stage's request is in
 * flight (so every stage before it is recorded) and then resumed.
 */

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { startFakeOpenAI, type FakeOpenAI, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { makeTempDir } from "../helpers/temp.ts";

/** Names a request's stage from its prompt (the first user message; `req` for the rest, e.g. a continued session's last one). */
export type StageOf = (prompt: string, req: RecordedRequest) => string;
/** The answer for the n-th request (0-based) of a stage. */
export type Answers = (stage: string, n: number, req: RecordedRequest) => Reply;

export interface Scripted {
  server: FakeOpenAI;
  env: Record<string, string>;
  counts: Map<string, number>;
  /** Stage whose request is held (not answered) until the client goes away. */
  holdStage?: string;
  /** Answers from now on (one server for several scenarios). */
  setAnswers(answers: Answers): void;
  close(): Promise<void>;
}

export async function scriptedServer(stageOf: StageOf, answers: Answers): Promise<Scripted> {
  const counts = new Map<string, number>();
  let current = answers;
  const scripted: Scripted = {} as Scripted;
  const server = await startFakeOpenAI((req) => {
    const prompt = req.body.messages.find((m) => m.role === "user")?.content ?? "";
    const stage = stageOf(prompt, req);
    const n = counts.get(stage) ?? 0;
    counts.set(stage, n + 1);
    if (scripted.holdStage === stage) return { hold: new Promise(() => {}), text: "never" };
    return current(stage, n, req);
  });
  Object.assign(scripted, {
    server,
    counts,
    setAnswers: (a: Answers) => (current = a),
    env: { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" },
    close: () => server.close(),
  });
  return scripted;
}

export interface Finished {
  code: number;
  runId: string;
  outputs: Record<string, unknown>;
  status: string;
  stdout: string;
  stderr: string;
  /** killAtStageAndResume: when the resume started (a stage that ended before it was recorded by the killed run). */
  resumedAt?: number;
}

function finished(code: number, stdout: string, stderr: string): Finished {
  const lines = stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
  const last = lines.at(-1) ?? {};
  const started = lines.find((l) => l.type === "run_started" && !l.parentId);
  return { code, runId: String(last.runId ?? started?.runId), outputs: (last.outputs ?? {}) as Record<string, unknown>, status: String(last.status), stdout, stderr };
}

export async function runBuiltin(name: string, inputs: string[], s: Scripted, home: string, cwd: string): Promise<Finished> {
  const r = await runAtomic(["--json", "run", name, ...inputs.flatMap((i) => ["--input", i]), "--workers", "2"], { home, cwd, env: s.env });
  return finished(r.code, r.stdout, r.stderr);
}

/** Runs until `stage`'s first request arrives, SIGKILLs atomic, resets the counts, resumes. */
export async function killAtStageAndResume(name: string, inputs: string[], s: Scripted, stage: string, home: string, cwd: string): Promise<Finished> {
  s.holdStage = stage;
  const proc = spawnAtomic(["--json", "run", name, ...inputs.flatMap((i) => ["--input", i]), "--workers", "2"], { home, cwd, env: s.env });
  const out = lineWatcher(proc.stdout);
  await waitUntil(() => (s.counts.get(stage) ?? 0) > 0, 60_000, `the ${stage} stage's request`);
  proc.kill("SIGKILL");
  await proc.exited;
  const started = out.lines.map((l) => JSON.parse(l) as { type: string; runId: string; parentId?: string | null });
  const runId = started.find((e) => e.type === "run_started" && !e.parentId)!.runId;
  s.holdStage = undefined;
  s.counts.clear();
  const resumedAt = Date.now();
  const r = await runAtomic(["--json", "resume", runId, "--workers", "2"], { home, cwd, env: s.env });
  return { ...finished(r.code, r.stdout, r.stderr), resumedAt };
}

/** Every file of a run's artifact directory, by name (a subdirectory's as "sub/name"). */
export function artifacts(dir: string, prefix = ""): Record<string, string> {
  const files: Record<string, string> = {};
  for (const f of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    if (f.isDirectory()) Object.assign(files, artifacts(join(dir, f.name), `${prefix}${f.name}/`));
    else files[`${prefix}${f.name}`] = readFileSync(join(dir, f.name), "utf8");
  }
  return files;
}

export function homeAndCwd(): { home: string; cwd: string } {
  return { home: makeTempDir("atomic-builtin-home-"), cwd: makeTempDir("atomic-builtin-cwd-") };
}

/** A value with a run's id and cwd replaced by RUN and CWD (two runs' outputs compare equal when only those differ). */
export function normalized(value: unknown, runId: string, cwd: string): unknown {
  return JSON.parse(JSON.stringify(value).replaceAll(runId, "RUN").replaceAll(cwd, "CWD"));
}

/** A seeded pick (the seed printed, so a failing pick can be replayed with BUILTIN_KILL_SEED). */
export function pick<T>(label: string, items: readonly T[]): T {
  const seed = Number(process.env.BUILTIN_KILL_SEED ?? Math.floor(Math.random() * 1e9));
  const item = items[seed % items.length]!;
  console.log(`${label}: kill at ${String(item)} (BUILTIN_KILL_SEED=${seed})`);
  return item;
}

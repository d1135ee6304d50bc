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

/** A request's first user message as text (a CLI agent may send it as content parts). */
export function promptOf(req: RecordedRequest): string {
  const content = req.body.messages.find((m) => m.role === "user")?.content as string | { text?: string }[] | null | undefined;
  return typeof content === "string" ? content : (content ?? []).map((p) => p.text ?? "").join("");
}

export async function scriptedServer(stageOf: StageOf, answers: Answers): Promise<Scripted> {
  const counts = new Map<string, number>();
  let current = answers;
  const scripted: Scripted = {} as Scripted;
  const server = await startFakeOpenAI((req) => {
    const prompt = promptOf(req);
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
export async function killAtStageAndResume(name: string, inputs: string[], s: Scripted, stage: string, home: string, cwd: string): Promise<Finished & { recorded: string[] }> {
  s.holdStage = stage;
  const proc = spawnAtomic(["--json", "run", name, ...inputs.flatMap((i) => ["--input", i]), "--workers", "2"], { home, cwd, env: s.env });
  const out = lineWatcher(proc.stdout);
  await waitUntil(() => (s.counts.get(stage) ?? 0) > 0, 60_000, `the ${stage} stage's request`);
  proc.kill("SIGKILL");
  await proc.exited;
  const started = out.lines.map((l) => JSON.parse(l) as { type: string; runId: string; parentId?: string | null });
  const runId = started.find((e) => e.type === "run_started" && !e.parentId)!.runId;
  const recorded = await recordedStages(runId, s, home);
  s.holdStage = undefined;
  s.counts.clear();
  const resumedAt = Date.now();
  const r = await runAtomic(["--json", "resume", runId, "--workers", "2"], { home, cwd, env: s.env });
  return { ...finished(r.code, r.stdout, r.stderr), recorded, resumedAt };
}

/** The names of a run's stages whose result is recorded (`atomic show --json`): a resume must not run them again. */
export async function recordedStages(runId: string, s: Scripted, home: string): Promise<string[]> {
  const show = await runAtomic(["show", runId, "--json"], { home, env: s.env });
  const steps = (JSON.parse(show.stdout) as { steps: { kind: string; name: string; exitCode?: number | null }[] }).steps;
  // Only a stage's checkpoint sets exitCode (null for an agent stage). A status is not enough: a failure
  // returned as a result ("failureMode: return") shows as failed from its failed attempt on, before its checkpoint.
  return steps.filter((st) => st.kind === "stage" && st.exitCode !== undefined).map((st) => st.name);
}

/** The per-stage request counts of an uninterrupted run without the stages a killed run had recorded. */
export function withoutRecorded(full: Record<string, number>, recorded: readonly string[]): Record<string, number> {
  return Object.fromEntries(Object.entries(full).filter(([stage]) => !recorded.includes(stage)));
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

/** An open or answered question of a run (`atomic inbox --json`). */
export interface Question {
  id: string;
  question: string;
  state: string;
  choices?: string[];
}

export interface Driven extends Finished {
  /** Questions answered by this drive, in order. */
  answered: string[];
  killed: boolean;
  /** With killAt: the stages recorded when it was killed. */
  recorded: string[];
}

/**
 * `atomic run` (or `resume`) with --json, answering every open question
 * with `answer(question)` through `atomic answer`. `killAt` SIGKILLs it when
 * that stage's first request arrives (the request is held), or, as
 * `ask:<text>`, when a question containing <text> is open (unanswered).
 * `workers`: the run's --workers (1 for a run whose stages start a real agent CLI).
 */
export async function drive(args: string[], s: Scripted, home: string, cwd: string, answer: (q: Question) => string, killAt?: string, workers = 2): Promise<Driven> {
  const askKill = killAt?.startsWith("ask:") ? killAt.slice(4) : undefined;
  if (killAt && !askKill) s.holdStage = killAt;
  const proc = spawnAtomic(["--json", ...args, "--workers", String(workers)], { home, cwd, env: s.env });
  const out = lineWatcher(proc.stdout);
  const stderr = new Response(proc.stderr).text();
  const runId = () => {
    for (const l of out.lines) {
      const e = JSON.parse(l) as { runId?: string };
      if (e.runId) return e.runId;
    }
    return args[0] === "resume" ? args[1] : undefined;
  };
  let exited = false;
  void proc.exited.then(() => (exited = true));
  const answered: string[] = [];
  let killed = false;
  // The inbox is asked (a spawn of the binary, 60-100 CPU-ms) when the run printed something since the last
  // look (a question opening prints its `prompt` event), and at least once a second in case one came without
  // a line; asked every 100 ms instead, it cost more CPU than the run it watched.
  let linesSeen = -1;
  let lookedAt = 0;
  while (!exited && !killed) {
    if (killAt && !askKill && (s.counts.get(killAt) ?? 0) > 0) killed = true;
    const id = runId();
    if (!killed && id && (out.lines.length !== linesSeen || Date.now() - lookedAt >= 1_000)) {
      linesSeen = out.lines.length;
      lookedAt = Date.now();
      const box = await runAtomic(["inbox", id, "--json"], { home, env: s.env });
      const open = box.code === 0 ? (JSON.parse(box.stdout) as { prompts: Question[] }).prompts.find((p) => p.state === "open") : undefined;
      if (open && askKill !== undefined && open.question.includes(askKill)) killed = true;
      else if (open) {
        const a = await runAtomic(["answer", id, open.id, answer(open)], { home, env: s.env });
        if (a.code !== 0) throw new Error(`atomic answer failed: ${a.stderr}`);
        answered.push(open.question);
      }
    }
    if (!killed) await Bun.sleep(100);
  }
  let recorded: string[] = [];
  if (killed) {
    proc.kill("SIGKILL");
    await proc.exited;
    s.holdStage = undefined;
    recorded = await recordedStages(runId()!, s, home);
  }
  await proc.exited;
  const done = finished(proc.exitCode ?? -1, out.lines.join("\n"), await stderr);
  return { ...done, runId: runId()!, answered, killed, recorded };
}

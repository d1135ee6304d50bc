/**
 * ctx.ask: a question to a person; the run waits, durably, for the answer.
 *
 * The question is a prompt in the journal, opened by the step's start
 * record (`step_started` with its id, question, choices and deadline) in
 * the same commit that turns the run's status to awaiting_input (and the
 * root's, for a child run). Anyone answers it (`atomic answer`, the status
 * page, intercom): the answer is written to the journal first; the driver
 * sees it (poll, or woken by a notification), checkpoints it and the run
 * goes on ("running" again once no question of it is open).
 *
 * Resume: a checkpointed answer is replayed. A question recorded but not
 * answered is waited for again under the same id (the deadline is the
 * recorded one); answered meanwhile, it returns at once. A question that
 * timed out fails the step (not checkpointed), so a resumed run asks anew.
 * A run stopped while a question waits ends awaiting_input (RunExecution).
 */

import { StepFailedError } from "../../shared/errors.ts";
import type { AskOptions } from "../../sdk/types.ts";
import type { AppendEntry } from "../../journal/append.ts";
import type { PromptRecord } from "../../journal/prompts.ts";
import type { StepRun } from "../step-run.ts";
import type { Scope } from "../scope.ts";
import { EVENT, type StepIdentity } from "../journal-events.ts";
import { checkText } from "../messaging.ts";
import { digestArgs } from "../values.ts";
import { MAX_CHOICES, validChoices } from "../../shared/question-choices.ts";


export async function runAsk(exec: StepRun, question: string, opts: AskOptions): Promise<string> {
  const name = opts.name ?? (typeof question === "string" && question.trim() ? question.trim().replace(/\s+/g, " ").slice(0, 60) : "ask");
  const choices = opts.choices ?? null;
  const scope = exec.scope();
  const position = scope.nextPosition();
  const step: StepIdentity = { kind: "ask", name, args: digestArgs({ question, choices }) };
  return (await askAt(exec, scope, position, step, question, choices, opts.timeoutMs)).answer;
}

/** An answered question: the answer, and what the asker recorded with it (`extra`). */
export interface Answered {
  answer: string;
  extra: Record<string, unknown>;
  /** Who answered (cli, the page, intercom), when recorded. */
  by?: string | null;
}

/**
 * The question asked at `position` (ctx.ask, or an agent's ask_user tool:
 * steps/agent-asks.ts): replayed when its answer is checkpointed, else
 * recorded (or found recorded) and waited for. `extra` is recorded with the
 * question and its answer, and given back on replay.
 */
export async function askAt(
  exec: StepRun,
  scope: Scope,
  position: string,
  step: StepIdentity,
  question: string,
  choices: string[] | null,
  timeoutMs: number | undefined,
  extra: Record<string, unknown> = {},
): Promise<Answered> {
  const { name } = step;
  const recorded = exec.cursor.claim(position, step);
  const { tree } = exec;
  const rootId = tree.lease.rootId;
  if (recorded?.checkpoint) {
    tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "ask", name, status: "completed", replayed: true, at: Date.now() });
    const result = recorded.checkpoint.result as { answer: string; extra?: Record<string, unknown>; answeredBy?: string | null };
    return { answer: result.answer, extra: result.extra ?? {}, by: result.answeredBy ?? null };
  }
  await exec.startGate(scope);
  checkQuestion(name, question, choices, timeoutMs);
  const opts = { timeoutMs };

  // The question recorded by an earlier driver, unless it timed out (then it is asked anew).
  let prompt: PromptRecord | undefined;
  const earlier = recorded?.started?.promptId;
  if (earlier) {
    const row = await tree.journal.messages.getPrompt(rootId, earlier);
    if (row && row.state !== "timed_out") prompt = row;
  }
  const startedAt = Date.now();
  if (prompt?.state === "answered") {
    // Answered while no process drove the run: recorded now, no waiting.
    return { answer: await record(exec, position, step, prompt, startedAt, false, [], extra), extra, by: prompt.answeredBy };
  }
  const promptId = prompt?.id ?? newPromptId();
  const { runFirst, treeFirst } = tree.mail.promptOpened(exec.runId, promptId);
  const entries: AppendEntry[] = [];
  if (prompt) {
    // Waited for again: only the status says so (the question and its start are recorded).
    if (runFirst) entries.push(statusEntry(exec.runId, "running", "awaiting_input", `question ${promptId} waits for an answer`));
  } else {
    const deadline = opts.timeoutMs ? tree.clock.now() + opts.timeoutMs : null;
    entries.push({
      runId: exec.runId,
      type: EVENT.stepStarted,
      key: position,
      payload: { ...step, attempt: (recorded?.attempts ?? 0) + 1, promptId, question, choices, deadline, ...(Object.keys(extra).length ? { extra } : {}) },
      prompt: { id: promptId, question, choices, deadline },
      ...(runFirst ? { patch: { status: "awaiting_input" as const } } : {}),
    });
  }
  if (treeFirst && exec.runId !== rootId) {
    entries.push(statusEntry(rootId, "running", "awaiting_input", `question ${promptId} of run ${exec.runId} waits for an answer`));
  }
  try {
    await Promise.all(entries.map((e) => tree.append(e)));
  } catch (err) {
    tree.mail.promptClosed(promptId);
    throw err;
  }
  prompt ??= await tree.journal.messages.getPrompt(rootId, promptId);
  const deadline = prompt?.deadline ?? null;
  tree.observer({ type: "step_started", runId: exec.runId, position, kind: "ask", name, attempt: 1, at: startedAt });
  tree.observer({ type: "prompt", runId: exec.runId, rootId, position, promptId, question, choices, state: "open", at: Date.now() });

  let answered: PromptRecord;
  try {
    answered = await tree.mail.waitForAnswer(promptId, deadline, scope.signal);
  } catch (err) {
    // Stopped while waiting: the question stays open in the journal (and in the tree, so the run ends awaiting_input).
    if (scope.signal.aborted) throw exec.stopError(scope);
    tree.mail.promptClosed(promptId);
    throw err;
  }
  const { runLast, treeLast } = tree.mail.promptClosed(promptId);
  const back: AppendEntry[] = [];
  if (treeLast && exec.runId !== rootId) back.push(statusEntry(rootId, "awaiting_input", "running", `question ${promptId} was ${answered.state === "answered" ? "answered" : "not answered in time"}`));
  if (answered.state !== "answered") {
    if (runLast) back.push(statusEntry(exec.runId, "awaiting_input", "running", `question ${promptId} timed out`));
    await Promise.all(back.map((e) => tree.append(e)));
    tree.observer({ type: "prompt", runId: exec.runId, rootId, position, promptId, question, choices, state: "timed_out", at: Date.now() });
    tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "ask", name, status: "failed", replayed: false, at: Date.now() });
    throw new StepFailedError(name, `question ${promptId} ("${question.slice(0, 80)}") was not answered within ${opts.timeoutMs ?? 0} ms`, {
      code: "ask_timeout",
      hint: `resume to ask again: atomic resume ${rootId}`,
    });
  }
  return { answer: await record(exec, position, step, answered, startedAt, runLast, back, extra), extra, by: answered.answeredBy };
}

/** Checkpoints the answer (with the status back to running when no question of the run is open any more). */
async function record(
  exec: StepRun,
  position: string,
  step: StepIdentity,
  answered: PromptRecord,
  startedAt: number,
  runLast: boolean,
  before: AppendEntry[] = [],
  extra: Record<string, unknown> = {},
): Promise<string> {
  const { tree } = exec;
  const result = { promptId: answered.id, answer: answered.answer!, answeredBy: answered.answeredBy, answeredAt: answered.answeredAt, ...(Object.keys(extra).length ? { extra } : {}) };
  const entries = [
    ...before,
    {
      runId: exec.runId,
      type: EVENT.checkpoint,
      key: position,
      payload: { ...step, result, startedAt },
      ...(runLast ? { patch: { status: "running" as const } } : {}),
    },
  ];
  await Promise.all(entries.map((e) => tree.append(e)));
  tree.observer({ type: "prompt", runId: exec.runId, rootId: tree.lease.rootId, position, promptId: answered.id, question: answered.question, choices: answered.choices, state: "answered", answer: result.answer, by: answered.answeredBy, at: Date.now() });
  tree.observer({ type: "step_ended", runId: exec.runId, position, kind: "ask", name: step.name, status: "completed", replayed: false, at: Date.now() });
  return result.answer;
}

function statusEntry(runId: AppendEntry["runId"], from: "running" | "awaiting_input", to: "running" | "awaiting_input", reason: string): AppendEntry {
  return { runId, type: EVENT.statusChanged, payload: { from, to, reason }, patch: { status: to } };
}

function checkQuestion(name: string, question: unknown, choices: unknown, timeoutMs: unknown): void {
  try {
    checkText(question, "message");
  } catch {
    throw new StepFailedError(name, "ctx.ask needs a non-empty question", { code: "bad_step" });
  }
  if (choices !== null) {
    if (!validChoices(choices)) {
      throw new StepFailedError(name, `ctx.ask choices must be 1 to ${MAX_CHOICES} distinct non-empty strings`, { code: "bad_step" });
    }
  }
  if (timeoutMs !== undefined && (typeof timeoutMs !== "number" || !Number.isFinite(timeoutMs) || timeoutMs <= 0)) {
    throw new StepFailedError(name, `ctx.ask timeoutMs must be a positive number of milliseconds, got ${String(timeoutMs)}`, { code: "bad_step" });
  }
}

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

/** Short enough to type: "q" and 7 characters (unique per root run with overwhelming odds; the journal enforces it). */
function newPromptId(): string {
  let out = "q";
  for (const b of crypto.getRandomValues(new Uint8Array(7))) out += ALPHABET[b % 32];
  return out;
}

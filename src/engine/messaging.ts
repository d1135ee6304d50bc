/**
 * Sending messages to stages and answering prompts, from any process: the
 * CLI (`atomic send`, `atomic answer`), the status page and `ctx.send`.
 *
 * A message is addressed to `<run>:<stage path or pattern>` (paths through
 * child workflows: `review/security`; patterns: src/intercom/addresses.ts)
 * and recorded in the journal at once (MessageStore.enqueue), so it is
 * durable before anyone is told about it. Where it goes is decided inside
 * that transaction from the stage index:
 * - an exact path of a stage that has started and not finished: that
 *   stage (its driver delivers it live, or at the stage's next attempt);
 * - an exact path no stage has yet: the first stage with that path to start
 *   (it receives it before its first turn), unless the path cannot exist
 *   any more: it runs through a stage or a finished child workflow, or the
 *   run has ended; then the message is refused, naming close matches;
 * - a pattern: every started, unfinished stage it matches; with `sticky`,
 *   also every matching stage that starts later. A pattern that matches no
 *   such stage (and is not sticky) is refused, naming close matches.
 * A stage that finished cannot receive anything: refused.
 * From `atomic send` (checkNames), a path or pattern whose last segment is
 * a plain name is first checked against the stage names the run's pinned
 * code spells out (stage-names.ts): a name no path of the workflow can reach
 * is refused (nothing is recorded); when the workflow builds names at run
 * time, it is accepted with a warning.
 *
 * Live delivery is the run's driver's job (tree-mail.ts): it polls the
 * journal, and a notification through intercom only makes it look sooner.
 */

import type { Journal } from "../journal/journal.ts";
import type { DeliveryRecord, MessageMode, PlannedDelivery } from "../journal/messages.ts";
import type { PromptRecord } from "../journal/prompts.ts";
import type { RunRecord } from "../journal/runs.ts";
import type { StageRow } from "../journal/stage-index.ts";
import { MAX_MESSAGE_TEXT, MESSAGE_MODES } from "../journal/messages.ts";
import { TERMINAL_STATUSES } from "../journal/runs.ts";
import { AtomicError, UsageError } from "../shared/errors.ts";
import { newId, type RunId } from "../shared/ids.ts";
import { closeMatches } from "../shared/close-matches.ts";
import { isPattern, literalPrefix, matchesPath, parseStagePath } from "../intercom/addresses.ts";
import { IntercomClient } from "../intercom/client.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import { isLocalHolderDead } from "../shared/process-info.ts";
import { pinnedFiles, pinnedManifest } from "./pinned-code.ts";
import { scanStageNames, type StageNames } from "./stage-names.ts";

export interface SendRequest {
  /** The run the path is relative to: a root run, or a child run (its stages' paths are then relative to it). */
  run: RunRecord;
  target: string;
  text: string;
  mode?: string;
  sticky?: boolean;
  /** Message id (dedup key); default a new one. */
  id?: string;
  sender: string;
  /**
   * Compute `warning` (a person sends: `atomic send`, the page). It costs a
   * read of the run's stage index, which a workflow's own ctx.send and the
   * broker's relay do not pay per message.
   */
  warnUnknown?: boolean;
  /**
   * Check the target's last name against the stage names of the run's
   * pinned code first (`atomic send`): refused when no path of the workflow
   * can reach it, a warning when the workflow builds names at run time.
   */
  checkNames?: boolean;
  /**
   * A builtin's embedded source by name, for checkNames on a run of a
   * builtin (given by the caller: builtins.ts embeds the workflows, which
   * the SDK's declarations must not reach through this file).
   */
  builtinSource?: (name: string) => string | undefined;
}

export interface SendResult {
  runId: RunId;
  messageId: string;
  /** "exists": the same message (id and content) was sent before; nothing new was recorded. */
  status: "queued" | "exists";
  target: string;
  sticky: boolean;
  deliveries: DeliveryView[];
  /**
   * Set when the message waits for a stage that nothing of the run has
   * started yet (an exact path no stage has had): a typo is likely, so the
   * sender is told, with the close matches among the run's known stages.
   */
  warning?: string;
}

export interface DeliveryView {
  stage: string;
  state: DeliveryRecord["state"];
  /** For a queued delivery: whether its stage has started (live) or not yet. */
  started: boolean;
  reason?: string;
}

const MESSAGE_ID = /^[A-Za-z0-9._:@-]{1,200}$/;

/** Checks and records a message; throws a UsageError (nothing recorded) for anything a sender got wrong. */
/** A message id as given (`--id`), or refused: up to 200 letters, digits and . _ : @ - */
export function checkMessageId(id: string): string {
  if (!MESSAGE_ID.test(id)) {
    throw new UsageError("bad_message_id", `message id ${JSON.stringify(id.slice(0, 80))} is not valid`, {
      hint: "use up to 200 letters, digits and . _ : @ -",
    });
  }
  return id;
}

export async function sendMessage(journal: Journal, req: SendRequest): Promise<SendResult> {
  const text = checkText(req.text, "message");
  const mode = checkMode(req.mode);
  const id = checkMessageId(req.id ?? newId("msg"));
  const rootId = req.run.rootId;
  const relative = parseStagePath(req.target);
  const prefix = req.run.parentId ? await childPrefix(journal, req.run) : "";
  const target = prefix + relative;
  const sticky = req.sticky === true;
  const pattern = isPattern(target);
  const segments = target.split("/");
  const lookup = pattern
    ? { prefix: literalPrefix(target) }
    : { paths: segments.map((_, i) => segments.slice(0, i + 1).join("/")) };
  const proven = req.checkNames === true ? await checkProvable(journal, req.run, rootId, target, req.builtinSource) : undefined;
  let result;
  try {
    result = await journal.messages.enqueue(
      { rootId, id, target, text, mode, sticky, sender: req.sender, lookup },
      (seen) => plan(rootId, target, pattern, sticky, seen.root, seen.stages),
    );
  } catch (err) {
    if (err instanceof NoSuchStage) throw await explain(journal, err);
    throw err;
  }
  const started = new Set(result.deliveries.filter((d) => d.stageKey !== null).map((d) => d.seq));
  const future = req.warnUnknown === true && !pattern && result.deliveries.some((d) => d.stageKey === null && d.state === "queued");
  const warning = proven?.warning ?? (future && proven?.known !== true ? await unknownStageWarning(journal, rootId, target) : undefined);
  return {
    runId: rootId,
    messageId: result.message.id,
    status: result.status,
    target,
    sticky: result.message.sticky,
    deliveries: result.deliveries.map((d) => view(d, started.has(d.seq))),
    ...(warning ? { warning } : {}),
  };
}

/**
 * The last segment of `target` against the stage names of the run's pinned
 * code: refused (usage error) when the code proves no stage has that name
 * and the run has not had one; `known` when it does; a warning when the code
 * builds names at run time. Nothing is said for a glob segment, or a run
 * whose code has no source (a run older than pinning).
 */
/**
 * A target whose last name no path of the run's code can reach is refused
 * (close matches); one the code builds at run time gets a warning. Used by
 * `atomic send` and `atomic pause RUN STAGE`.
 */
export async function checkProvable(journal: Journal, run: RunRecord, rootId: RunId, target: string, builtin?: (name: string) => string | undefined): Promise<{ known?: boolean; warning?: string } | undefined> {
  const last = target.split("/").at(-1)!;
  if (isPattern(last)) return undefined;
  const scanned = await codeStageNames(journal, run, builtin);
  if (!scanned || scanned.names.has(last)) return scanned ? { known: true } : undefined;
  const stages = await journal.messages.stages(rootId);
  if (stages.some((s) => s.path === target)) return { known: true };
  // A path through a stage: the journal's own refusal says so more precisely (plan).
  if (stages.some((s) => s.kind === "stage" && target.startsWith(`${s.path}/`))) return undefined;
  if (scanned.computed) {
    return { warning: `the workflow of run ${rootId} builds stage names at run time, and none of those it spells out is ${last}; the message waits for a stage ${target} to start` };
  }
  const near = closeMatches(last, scanned.names);
  throw new UsageError("no_such_stage", `run ${rootId} has no stage ${target}: no stage of its workflow is named ${last}`, {
    hint: near.length ? `did you mean: ${near.join(", ")}` : `its stages: ${[...scanned.names].slice(0, 8).join(", ")}`,
  });
}

/**
 * The stage names of a run's code: a builtin's embedded source (one
 * self-contained file), or the code the run is pinned to; undefined when
 * there is no source (a run older than pinning) or it names no stage.
 */
async function codeStageNames(journal: Journal, run: RunRecord, builtin?: (name: string) => string | undefined): Promise<StageNames | undefined> {
  let sources: string[];
  if (run.workflowPath.startsWith("builtin:")) {
    const source = builtin?.(run.workflowPath.slice("builtin:".length));
    if (source === undefined) return undefined;
    sources = [source];
  } else {
    const manifest = await pinnedManifest(journal, run.workflowDigest);
    if (!manifest) return undefined;
    const files = await pinnedFiles(journal, manifest);
    const decoder = new TextDecoder();
    sources = [...files].filter(([path]) => /\.[cm]?[jt]sx?$/.test(path)).map(([, content]) => decoder.decode(content));
  }
  const scanned = scanStageNames(sources);
  return scanned.names.size > 0 || scanned.computed ? scanned : undefined;
}

/**
 * A message queued for a stage path the run has not started: what to tell
 * the sender, with close matches among the stage names the run knows (its
 * stage index).
 */
async function unknownStageWarning(journal: Journal, rootId: RunId, target: string): Promise<string> {
  // The stage index has every stage the run started (not a replay of its events: proportional to its stages).
  const known = new Set((await journal.messages.stages(rootId)).filter((s) => s.kind === "stage").map((s) => s.path));
  const near = closeMatches(target, known);
  const head = `no stage ${target} has started in run ${rootId}; the message waits for the first stage with that path to start`;
  if (near.length) return `${head} (close matches: ${near.join(", ")})`;
  return known.size ? `${head} (its stages so far: ${[...known].slice(0, 8).join(", ")})` : head;
}

function view(d: DeliveryRecord, started: boolean): DeliveryView {
  return { stage: d.stagePath, state: d.state, started, ...(d.reason ? { reason: d.reason } : {}) };
}

/** Current states of one message's deliveries (after its driver had a chance to deliver). */
export async function deliveryStates(journal: Journal, rootId: RunId, messageId: string): Promise<DeliveryView[]> {
  const { deliveries } = await journal.messages.messagesOf(rootId);
  return deliveries.filter((d) => d.messageId === messageId).map((d) => view(d, d.stageKey !== null));
}

export function checkText(text: unknown, what: "message" | "answer"): string {
  if (typeof text !== "string" || text.trim() === "") {
    throw new UsageError(`empty_${what}`, `the ${what} text is empty`, { hint: `give the ${what} as a non-empty argument, quoted if it has spaces` });
  }
  if (text.length > MAX_MESSAGE_TEXT) {
    throw new UsageError(`${what}_too_long`, `the ${what} is ${text.length} characters long; the limit is ${MAX_MESSAGE_TEXT}`, {
      hint: "put long content in a file and send its path",
    });
  }
  return text;
}

function checkMode(mode: string | undefined): MessageMode {
  if (mode === undefined) return "steer";
  if ((MESSAGE_MODES as readonly string[]).includes(mode)) return mode as MessageMode;
  throw new UsageError("bad_mode", `delivery mode must be one of ${MESSAGE_MODES.join(", ")}, got ${JSON.stringify(mode)}`, {
    hint: "steer: now, into the current turn; followUp: after it; interrupt: end the turn, then deliver",
  });
}

/** A child run's stage paths start with its boundary's path in the root ("review/"). */
async function childPrefix(journal: Journal, run: RunRecord): Promise<string> {
  const rows = await journal.messages.stages(run.rootId);
  const boundary = rows.find((r) => r.kind === "child" && r.childRunId === run.id);
  if (!boundary) throw new UsageError("unknown_run", `run ${run.id} is a child run whose boundary is not recorded`, { hint: `address its root run: ${run.rootId}` });
  return `${boundary.path}/`;
}

/** Refusal that needs the run's stage list (read outside the transaction) to name close matches. */
class NoSuchStage extends Error {
  constructor(
    readonly rootId: RunId,
    readonly target: string,
    readonly why: string,
    readonly code: string,
  ) {
    super(why);
  }
}

async function explain(journal: Journal, e: NoSuchStage): Promise<UsageError> {
  const stages = (await journal.messages.stages(e.rootId)).filter((s) => s.kind === "stage");
  const near = closeMatches(isPattern(e.target) ? literalPrefix(e.target) || e.target : e.target, stages.map((s) => s.path));
  const hint = near.length
    ? `close matches: ${near.join(", ")}`
    : stages.length
      ? `its stages so far: ${[...new Set(stages.map((s) => s.path))].slice(0, 8).join(", ")}`
      : `see its stages with: atomic show ${e.rootId}`;
  return new UsageError(e.code, e.why, { hint });
}

function plan(rootId: RunId, target: string, pattern: boolean, sticky: boolean, root: RunRecord | undefined, stages: StageRow[]): PlannedDelivery[] {
  if (!root) throw new UsageError("unknown_run", `no run with id ${rootId}`, { hint: "list runs with: atomic runs" });
  const ended = TERMINAL_STATUSES.includes(root.status);
  const stageRows = stages.filter((s) => s.kind === "stage");
  if (pattern) {
    const matched = stageRows.filter((s) => matchesPath(target, s.path));
    const live = matched.filter((s) => s.state !== "finished");
    if (ended) {
      throw matched.length
        ? new UsageError("run_ended", `run ${rootId} already ${root.status}; its stages cannot receive messages`, { hint: `see it with: atomic show ${rootId}` })
        : new NoSuchStage(rootId, target, `no stage of run ${rootId} matches ${target}`, "no_match");
    }
    if (live.length === 0 && !sticky) {
      if (matched.length) {
        throw new UsageError("stage_finished", `every stage of run ${rootId} matching ${target} has finished`, {
          hint: "a finished stage cannot receive messages; send with --sticky to reach matching stages that start later",
        });
      }
      throw new NoSuchStage(rootId, target, `no started stage of run ${rootId} matches ${target}`, "no_match");
    }
    return live.map((s) => ({ stagePath: s.path, runId: s.runId, stageKey: s.key }));
  }
  const rows = stageRows.filter((s) => s.path === target);
  const live = rows.filter((s) => s.state !== "finished");
  if (live.length > 0) {
    if (ended) throw new UsageError("run_ended", `run ${rootId} already ${root.status}; its stages cannot receive messages`, { hint: `see it with: atomic show ${rootId}` });
    return live.map((s) => ({ stagePath: s.path, runId: s.runId, stageKey: s.key }));
  }
  if (ended && rows.length > 0) {
    throw new UsageError("run_ended", `run ${rootId} already ${root.status}; its stages cannot receive messages`, { hint: `see it with: atomic show ${rootId}` });
  }
  if (rows.length > 0 && !sticky) {
    throw new UsageError("stage_finished", `stage ${target} of run ${rootId} has finished; it cannot receive messages`, {
      hint: `see what it did with: atomic logs ${rootId} --stage ${target}`,
    });
  }
  if (stages.some((s) => s.kind === "child" && s.path === target)) {
    throw new UsageError("not_a_stage", `${target} is a child workflow of run ${rootId}, not a stage`, { hint: `address its stages: ${target}/<stage>, or ${target}/* for all of them` });
  }
  // No stage with this path yet: a future stage, if the path can still come to exist.
  const segments = target.split("/");
  for (let i = 1; i < segments.length; i++) {
    const prefix = segments.slice(0, i).join("/");
    const here = stages.filter((s) => s.path === prefix);
    if (here.length === 0) continue;
    if (here.every((s) => s.kind === "stage")) {
      throw new NoSuchStage(rootId, target, `run ${rootId} has no stage ${target}: ${prefix} is a stage, not a child workflow`, "no_such_stage");
    }
    if (here.every((s) => s.kind === "stage" || s.state === "finished")) {
      throw new NoSuchStage(rootId, target, `run ${rootId} has no stage ${target}, and its child workflow ${prefix} has finished`, "no_such_stage");
    }
  }
  if (ended) throw new NoSuchStage(rootId, target, `run ${rootId} has no stage ${target} (the run ${root.status})`, "no_such_stage");
  // A sticky message reaches stages of this path as they start (claimForStage); nothing to queue now.
  return sticky ? [] : [{ stagePath: target }];
}

// ---------------------------------------------------------------- answers

export interface AnswerResult {
  runId: RunId;
  promptId: string;
  status: "answered" | "exists";
  prompt: PromptRecord;
}

/** Answers an open question of a run (any run of its tree); checks the answer against its choices. */
export async function answerPrompt(journal: Journal, run: RunRecord, promptId: string, answer: string, by: string): Promise<AnswerResult> {
  const text = checkText(answer, "answer");
  const id = promptId.trim();
  const root = run.parentId ? await journal.getRun(run.rootId) : run;
  if (root && TERMINAL_STATUSES.includes(root.status)) {
    throw new UsageError("run_ended", `run ${run.rootId} already ${root.status}; its questions cannot be answered any more`, { hint: `see it with: atomic show ${run.rootId}` });
  }
  const prompt = await journal.messages.getPrompt(run.rootId, id);
  if (!prompt) {
    const open = await journal.messages.prompts(run.rootId, "open");
    throw new UsageError("unknown_prompt", `run ${run.rootId} has no question ${JSON.stringify(id)}`, {
      hint: open.length ? `its open questions: ${open.map((p) => p.id).join(", ")}` : `it has no open question; see: atomic inbox ${run.rootId}`,
    });
  }
  if (prompt.choices && prompt.state === "open" && !prompt.choices.includes(text)) {
    throw new UsageError("bad_answer", `the answer to ${id} must be one of ${prompt.choices.map((c) => JSON.stringify(c)).join(", ")}, got ${JSON.stringify(text)}`, {
      hint: `answer with one of the choices: atomic answer ${run.rootId} ${id} ${JSON.stringify(prompt.choices[0])}`,
    });
  }
  const result = await journal.messages.answerPrompt(run.rootId, id, text, by);
  return { runId: run.rootId, promptId: id, status: result.status, prompt: result.prompt };
}

// ---------------------------------------------------------------- the inbox

export interface InboxStage {
  stage: string;
  messages: { id: string; state: DeliveryRecord["state"]; mode: MessageMode; sticky: boolean; sender: string; text: string; attempt: number | null; reason: string | null; sentAt: number; settledAt: number | null }[];
}

export interface Inbox {
  runId: RunId;
  stages: InboxStage[];
  /** Sticky messages: they reach every matching stage that starts later. */
  sticky: { id: string; target: string; mode: MessageMode; text: string; sentAt: number }[];
  prompts: PromptRecord[];
}

export async function inbox(journal: Journal, run: RunRecord): Promise<Inbox> {
  const { messages, deliveries } = await journal.messages.messagesOf(run.rootId);
  const byId = new Map(messages.map((m) => [m.id, m]));
  const stages = new Map<string, InboxStage>();
  for (const d of deliveries) {
    const m = byId.get(d.messageId);
    if (!m) continue;
    let s = stages.get(d.stagePath);
    if (!s) stages.set(d.stagePath, (s = { stage: d.stagePath, messages: [] }));
    s.messages.push({
      id: m.id,
      state: d.state,
      mode: m.mode,
      sticky: m.sticky,
      sender: m.sender,
      text: m.text,
      attempt: d.attempt,
      reason: d.reason,
      sentAt: m.createdAt,
      settledAt: d.settledAt,
    });
  }
  return {
    runId: run.rootId,
    stages: [...stages.values()].sort((a, b) => a.stage.localeCompare(b.stage)),
    sticky: messages.filter((m) => m.sticky).map((m) => ({ id: m.id, target: m.target, mode: m.mode, text: m.text, sentAt: m.createdAt })),
    prompts: await journal.messages.prompts(run.rootId),
  };
}

export function isUsage(err: unknown): err is AtomicError {
  return err instanceof AtomicError && err.disposition === "usage";
}

// ---------------------------------------------------------------- telling the driver

/** True while a live process drives the root run (its lease is held, unexpired, by a process that exists). */
export async function isDriven(journal: Journal, rootId: RunId, now = Date.now()): Promise<boolean> {
  const lease = await journal.getLease(rootId);
  return lease !== undefined && lease.renewedAt + lease.timeoutMs >= now && !isLocalHolderDead(lease);
}

/**
 * Tells a live run's driver to look at the journal now (through intercom,
 * starting the broker if needed unless `spawn` is false), and returns what
 * it replied; undefined when it could not be reached (it finds the news at
 * its next poll anyway).
 */
export async function notifyDriver(home: string, rootId: RunId, body: Record<string, unknown>, timeoutMs = 2_000, spawn = true): Promise<Record<string, unknown> | undefined> {
  let client: IntercomClient | undefined;
  try {
    client = await IntercomClient.connect({ home, role: "cli", spawn });
    const { reply } = await client.ask(rootId, body, timeoutMs);
    return reply as Record<string, unknown>;
  } catch {
    return undefined;
  } finally {
    client?.close();
  }
}

/**
 * How often settledStates reads the journal: it waits for a driver that could not be told (not on a broker, or
 * on another machine), and the journal notifies nobody of a delivery (SQLite cannot across processes;
 * docs/design/processes.md "Waiting for another process"). A driver delivers at its next poll (250 ms).
 */
const SETTLE_BACKOFF: Backoff = { firstMs: 25, maxMs: 250, jitter: 0.2 };

/**
 * Waits (at most `timeoutMs`) while deliveries of a message to started stages are still queued; returns the
 * states then. For a driver that could not be told: one that can answers a `mail` request once they settled.
 */
export async function settledStates(journal: Journal, rootId: RunId, messageId: string, timeoutMs: number): Promise<DeliveryView[]> {
  const deadline = Date.now() + timeoutMs;
  for (let look = 0; ; look++) {
    const states = await deliveryStates(journal, rootId, messageId);
    if (!states.some((d) => d.state === "queued" && d.started) || Date.now() >= deadline) return states;
    await Bun.sleep(Math.min(backoffDelay(SETTLE_BACKOFF, look), Math.max(0, deadline - Date.now())));
  }
}

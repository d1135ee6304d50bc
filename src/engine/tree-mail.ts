/**
 * The driver's side of messages and prompts, one per run tree.
 *
 * - Stage paths: each run's prefix ("" for the root, "review/" for a child
 *   started as "review"), so a stage knows its address.
 * - Before a stage attempt runs, `claim` takes its queued messages (and
 *   sticky ones that match) from the journal: they go into the stage
 *   request, written before anything else (a shell stage's stdin).
 * - While stages run, a poll (MAIL_POLL_MS) reads queued deliveries bound
 *   to them and hands each to the executor (`deliver`), in order, then
 *   records it delivered (fenced, journaled). A delivery whose stage has
 *   finished becomes undeliverable; one whose stage stopped or failed
 *   waits for the stage's next attempt.
 * - Prompts: which are open (for the run's awaiting_input status), and
 *   waiting for their answers (the same poll; a notification wakes it).
 * - Intercom: the driver joins the home's broker when one runs (it never
 *   starts one), as session `<root id>` plus `<root id>:<stage path>` per
 *   running stage, all in group `<root id>`; a notification there makes it
 *   look at the journal at once instead of at the next poll.
 *
 * Nothing here is needed for correctness across crashes: the journal holds
 * every message and answer, and a resumed driver finds them.
 */

import { existsSync, statSync } from "node:fs";
import { dirname } from "node:path";
import type { LiveDelivery, PromptRecord, RunStatus, StageIndexEntry, StageMail, StageState } from "../journal/types.ts";
import { TERMINAL_STATUSES } from "../journal/types.ts";
import { IntercomClient, runGroup } from "../intercom/client.ts";
import { intercomPaths } from "../intercom/paths.ts";
import { matchesPath } from "../intercom/addresses.ts";
import type { IncomingMessage } from "../intercom/protocol/index.ts";
import { LeaseLostError, errorInfo } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { EVENT } from "./journal-events.ts";
import { answerPrompt, deliveryStates, sendMessage } from "./messaging.ts";
import type { RunTree } from "./run-tree.ts";

export const MAIL_POLL_MS = 250;

interface LiveStage {
  runId: RunId;
  stageKey: string;
  path: string;
  name: string;
  attempt: number;
}

export class TreeMail {
  private readonly prefixes = new Map<string, string>();
  private readonly live = new Map<string, LiveStage>();
  /** How many live attempts each stage path has (a path stays registered with the broker while any runs). */
  private readonly livePaths = new Map<string, number>();
  /** Open prompts of this tree: prompt id → asking run. */
  private readonly open = new Map<string, RunId>();
  private readonly sleepers = new Set<() => void>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private client: IntercomClient | undefined;
  private pumping: Promise<void> | undefined;
  private pumpAgain = false;
  private mailSeen = false;
  /** This turn's answer of anyMail(). */
  private mailCheck: Promise<boolean> | undefined;
  private closed = false;
  private socketSeen = 0;

  constructor(private readonly tree: RunTree) {}

  /** The atomic home: the tree's artifacts live in $ATOMIC_HOME/artifacts (driver.ts). */
  get home(): string {
    return dirname(this.tree.artifactsDir);
  }

  private get rootId(): RunId {
    return this.tree.lease.rootId;
  }

  // ---------------------------------------------------------------- paths

  prefixOf(runId: RunId): string {
    return runId === this.rootId ? "" : (this.prefixes.get(runId) ?? "");
  }

  /** A child run's stages live under its boundary's path. */
  setChildPrefix(childId: RunId, parentId: RunId, boundaryName: string): void {
    this.prefixes.set(childId, `${this.prefixOf(parentId)}${boundaryName}/`);
  }

  pathOf(runId: RunId, name: string): string {
    return `${this.prefixOf(runId)}${name}`;
  }

  /** The stage index row a stage's record carries (AppendEntry.stage): senders resolve paths against it. */
  stageEntry(runId: RunId, stageKey: string, name: string, state: StageState, attempt: number, kind: "stage" | "child" = "stage", childRunId?: string): StageIndexEntry {
    return { key: stageKey, path: this.pathOf(runId, name), name, kind, state, attempt, ...(childRunId ? { childRunId } : {}) };
  }

  // ---------------------------------------------------------------- stages

  /**
   * A stage attempt is about to run (before its start record, so a pooled
   * work item can carry them): the messages it receives before its first
   * turn. `claimed` says whether the journal was asked (it is not while the
   * root has no mail at all, the common case: one read, no transaction).
   */
  async claim(runId: RunId, stageKey: string, name: string, attempt: number): Promise<{ mail: StageMail[]; claimed: boolean }> {
    this.start();
    const path = this.pathOf(runId, name);
    if (!(await this.anyMail())) return { mail: [], claimed: false };
    const mail = await this.tree.journal.messages.claimForStage(
      this.tree.lease,
      { runId, stageKey, path, name, attempt },
      (pattern) => matchesPath(pattern, path),
      // Keyless: a message event is not a step record (replay and reports key steps by position).
      (fresh) => ({
        runId,
        type: EVENT.messagesDelivered,
        payload: { stageKey, stagePath: path, attempt, messageIds: fresh.map((m) => m.messageId), beforeStart: true },
      }),
    );
    for (const m of mail.filter((x) => x.fresh)) {
      this.tree.observer({ type: "message", runId, position: stageKey, stage: path, messageId: m.messageId, state: "delivered", live: false, at: Date.now() });
    }
    return { mail, claimed: true };
  }

  /**
   * The attempt's start is recorded and it is about to be handed to the
   * executor: from now on messages reach it live. If it was not claimed and
   * mail arrived meanwhile, that mail is bound to it (delivered live).
   */
  async running(runId: RunId, stageKey: string, name: string, attempt: number, claimed: boolean): Promise<void> {
    const path = this.pathOf(runId, name);
    this.live.set(key(runId, stageKey), { runId, stageKey, path, name, attempt });
    this.livePaths.set(path, (this.livePaths.get(path) ?? 0) + 1);
    void this.client?.register(`${this.rootId}:${path}`, [runGroup(this.rootId)]).catch(() => {});
    if (claimed) return;
    if (!(await this.anyMail())) return;
    const bound = await this.tree.journal.messages.bindForStage(this.tree.lease, { runId, stageKey, path, name, attempt }, (pattern) => matchesPath(pattern, path));
    if (bound > 0) this.kick();
  }

  /** The attempt ended (any way): no more live delivery to it. */
  ended(runId: RunId, stageKey: string): void {
    const stage = this.live.get(key(runId, stageKey));
    if (!stage) return;
    this.live.delete(key(runId, stageKey));
    const name = `${this.rootId}:${stage.path}`;
    // Counted per path: a fan-out of n stages must not cost n² here.
    const left = (this.livePaths.get(stage.path) ?? 1) - 1;
    if (left > 0) this.livePaths.set(stage.path, left);
    else {
      this.livePaths.delete(stage.path);
      void this.client?.unregister(name).catch(() => {});
    }
    // A delivery that raced the end is settled now rather than at the next poll.
    if (this.mailSeen) this.kick();
  }

  /** A child workflow finished: nothing under its path can start any more. */
  async childFinished(runId: RunId, boundaryName: string): Promise<void> {
    const prefix = `${this.pathOf(runId, boundaryName)}/`;
    await this.settleAll(`child workflow ${prefix.slice(0, -1)} finished before the stage started`, prefix);
  }

  /** The root run recorded how it ended; a run that can never go on settles what is still queued. */
  async runEnded(status: RunStatus): Promise<void> {
    if (TERMINAL_STATUSES.includes(status)) await this.settleAll(`the run ${status} before the stage received it`);
  }

  private async settleAll(reason: string, prefix?: string): Promise<void> {
    try {
      await this.tree.journal.messages.settleAll(this.tree.lease, this.rootId, reason, prefix);
    } catch (err) {
      if (err instanceof LeaseLostError) this.tree.stop("lease_lost");
      // otherwise: left queued; `atomic inbox` shows it, a later settle takes it
    }
  }

  // ---------------------------------------------------------------- live delivery

  /** Deliver what is queued for running stages now (coalesced: one pass at a time, another if asked meanwhile). */
  pump(): Promise<void> {
    if (this.pumping) {
      this.pumpAgain = true;
      return this.pumping;
    }
    this.pumping = (async () => {
      try {
        do {
          this.pumpAgain = false;
          await this.pumpOnce();
        } while (this.pumpAgain && !this.closed);
      } finally {
        this.pumping = undefined;
      }
    })();
    return this.pumping;
  }

  /**
   * Whether this tree has any mail at all, for a stage starting now. One
   * answer serves every stage that asks in the same event-loop turn: the
   * stages of a fan-out ask once, not twice each. Mail sent meanwhile
   * reaches them live, through the next poll (`pumpOnce` always asks).
   */
  private anyMail(): Promise<boolean> {
    if (this.mailSeen) return Promise.resolve(true);
    if (!this.mailCheck) {
      this.mailCheck = this.tree.journal.messages.hasMail(this.rootId).then((seen) => {
        if (seen) this.mailSeen = true;
        return seen;
      });
      setImmediate(() => {
        this.mailCheck = undefined;
      });
    }
    return this.mailCheck;
  }

  private kick(): void {
    void this.pump().catch(() => {});
  }

  private async pumpOnce(): Promise<void> {
    const { journal, lease, executor } = this.tree;
    if (!this.mailSeen) {
      this.mailSeen = await journal.messages.hasMail(this.rootId);
      if (!this.mailSeen) return;
    }
    const queued = await journal.messages.liveQueued(this.rootId);
    if (queued.length === 0) return;
    const changes: { seq: number; state: "delivered" | "undeliverable"; attempt?: number; reason?: string }[] = [];
    const byseq = new Map<number, LiveDelivery & { liveAttempt?: number }>();
    const finished = await this.finishedStages(queued);
    for (const d of queued) {
      byseq.set(d.seq, d);
      const stage = this.live.get(key(d.runId, d.stageKey));
      if (!stage) {
        if (finished.has(key(d.runId, d.stageKey))) changes.push({ seq: d.seq, state: "undeliverable", reason: `stage ${d.stagePath} finished before the message arrived` });
        continue; // stopped or failed: its next attempt receives it
      }
      if (!executor.deliver) continue;
      let outcome: "delivered" | "not_running";
      try {
        outcome = await executor.deliver({ runId: d.runId, stageKey: d.stageKey }, { id: d.messageId, text: d.text }, d.mode);
      } catch {
        continue; // retried at the next poll
      }
      if (outcome === "delivered") {
        changes.push({ seq: d.seq, state: "delivered", attempt: stage.attempt });
        byseq.get(d.seq)!.liveAttempt = stage.attempt;
      }
    }
    if (changes.length === 0) return;
    try {
      await journal.messages.settle(lease, changes, (changed) =>
        changed.map((seq) => {
          const d = byseq.get(seq)!;
          const c = changes.find((x) => x.seq === seq)!;
          return c.state === "delivered"
            ? { runId: d.runId, type: EVENT.messageDelivered, payload: { stageKey: d.stageKey, messageId: d.messageId, stagePath: d.stagePath, attempt: c.attempt, mode: d.mode } }
            : { runId: d.runId, type: EVENT.messageUndeliverable, payload: { stageKey: d.stageKey, messageId: d.messageId, stagePath: d.stagePath, reason: c.reason } };
        }),
      );
    } catch (err) {
      if (err instanceof LeaseLostError) this.tree.stop("lease_lost");
      return;
    }
    for (const c of changes) {
      const d = byseq.get(c.seq)!;
      this.tree.observer({ type: "message", runId: d.runId, position: d.stageKey, stage: d.stagePath, messageId: d.messageId, state: c.state, live: true, at: Date.now(), ...(c.reason ? { reason: c.reason } : {}) });
    }
  }

  /** Which of the deliveries' stages have finished (checkpointed), from the stage index. */
  private async finishedStages(queued: LiveDelivery[]): Promise<Set<string>> {
    const notLive = queued.filter((d) => !this.live.has(key(d.runId, d.stageKey)));
    if (notLive.length === 0) return new Set();
    const rows = await this.tree.journal.messages.stages(this.rootId);
    return new Set(rows.filter((r) => r.state === "finished").map((r) => key(r.runId, r.key)));
  }

  // ---------------------------------------------------------------- prompts

  /** A prompt opens: whether its run, and the tree, had none open before (their status turns awaiting_input). */
  promptOpened(runId: RunId, promptId: string): { runFirst: boolean; treeFirst: boolean } {
    this.start();
    const treeFirst = this.open.size === 0;
    const runFirst = ![...this.open.values()].includes(runId);
    this.open.set(promptId, runId);
    return { runFirst, treeFirst };
  }

  /** A prompt closed (answered or timed out): whether its run, and the tree, have none open now. */
  promptClosed(promptId: string): { runLast: boolean; treeLast: boolean } {
    const runId = this.open.get(promptId);
    this.open.delete(promptId);
    return { runLast: runId !== undefined && ![...this.open.values()].includes(runId), treeLast: this.open.size === 0 };
  }

  /** Runs with an open prompt (a run stopped while one waits ends awaiting_input, not interrupted). */
  hasOpenPrompt(runId?: RunId): boolean {
    return runId === undefined ? this.open.size > 0 : [...this.open.values()].includes(runId);
  }

  /**
   * Waits until the prompt is answered (or times out at `deadline`): polls the
   * journal, woken early by intercom notifications. Rejects when `signal` aborts.
   */
  async waitForAnswer(promptId: string, deadline: number | null, signal: AbortSignal): Promise<PromptRecord> {
    const { journal, lease } = this.tree;
    for (;;) {
      const prompt = await journal.messages.getPrompt(this.rootId, promptId);
      if (!prompt) throw new Error(`internal: prompt ${promptId} of run ${this.rootId} is not in the journal`);
      if (prompt.state !== "open") return prompt;
      const now = Date.now();
      if (deadline !== null && now >= deadline) {
        const after = await journal.messages.timeOutPrompt(lease, this.rootId, promptId);
        if (after && after.state !== "open") return after;
        continue;
      }
      await this.sleep(Math.min(MAIL_POLL_MS, deadline === null ? MAIL_POLL_MS : deadline - now), signal);
    }
  }

  private sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const done = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      const onAbort = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        reject(signal.reason);
      };
      const timer = setTimeout(done, Math.max(1, ms));
      this.sleepers.add(done);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  private wake(): void {
    for (const s of [...this.sleepers]) s();
  }

  // ---------------------------------------------------------------- lifetime and intercom

  /** Starts the poll and joins the broker (if one runs); idempotent. Started on first use, so runs without stages pay nothing. */
  start(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => this.tick(), MAIL_POLL_MS);
    this.client = new IntercomClient({
      home: this.home,
      role: "root",
      spawn: false,
      reconnect: true,
      onMessage: (msg, reply) => void this.onIntercom(msg, reply),
    });
    void this.client.register(this.rootId, [runGroup(this.rootId)]);
    this.client.start();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    this.timer = undefined;
    this.client?.close();
    this.client = undefined;
    await this.pumping?.catch(() => {});
    this.wake();
  }

  private tick(): void {
    if (this.live.size > 0 || this.mailSeen) this.kick();
    if (this.sleepers.size > 0) this.wake();
    // No broker when we started: join one as soon as its socket appears (instead of waiting out the backoff).
    if (this.client && !this.client.isOpen) {
      try {
        const socket = intercomPaths(this.home).socket;
        if (existsSync(socket)) {
          const ino = statSync(socket).ino;
          if (ino !== this.socketSeen) {
            this.socketSeen = ino;
            this.client.nudge();
          }
        }
      } catch {
        // checked again next tick
      }
    }
  }

  /**
   * Requests through intercom (the journal stays the source of truth):
   * - `{ type: "mail", messageId? }` to `<root>`: look for queued messages now; replies with the message's delivery states;
   * - `{ type: "answer", promptId, answer, by? }` to `<root>`: answer a question (recorded in the journal first);
   * - `{ type: "poke" }`: look at the journal now;
   * - `{ text, mode?, id? }` to `<root>:<stage path>`: a message to that stage, recorded, then delivered.
   */
  private async onIntercom(msg: IncomingMessage, reply: (body: unknown) => Promise<void>): Promise<void> {
    const body = (msg.body ?? {}) as Record<string, unknown>;
    let answer: unknown;
    try {
      if (msg.to !== this.rootId && msg.to.startsWith(`${this.rootId}:`)) {
        const run = await this.tree.journal.getRun(this.rootId);
        const sent = await sendMessage(this.tree.journal, {
          run: run!,
          target: msg.to.slice(this.rootId.length + 1),
          text: typeof body.text === "string" ? body.text : typeof msg.body === "string" ? msg.body : "",
          ...(typeof body.mode === "string" ? { mode: body.mode } : msg.mode ? { mode: msg.mode } : {}),
          ...(typeof body.id === "string" ? { id: body.id } : {}),
          sender: msg.from ?? "intercom",
        });
        await this.pump();
        answer = { ok: true, messageId: sent.messageId, deliveries: await deliveryStates(this.tree.journal, this.rootId, sent.messageId) };
      } else if (body.type === "mail") {
        this.mailSeen = true;
        await this.pump();
        answer = { ok: true, ...(typeof body.messageId === "string" ? { deliveries: await deliveryStates(this.tree.journal, this.rootId, body.messageId) } : {}) };
      } else if (body.type === "answer") {
        const run = await this.tree.journal.getRun(this.rootId);
        const result = await answerPrompt(this.tree.journal, run!, String(body.promptId ?? ""), String(body.answer ?? ""), typeof body.by === "string" ? body.by : (msg.from ?? "intercom"));
        this.wake();
        answer = { ok: true, status: result.status };
      } else {
        this.wake();
        this.kick();
        answer = { ok: true };
      }
    } catch (err) {
      answer = { ok: false, error: errorInfo(err) };
    }
    if (msg.ask) await reply(answer).catch(() => {});
  }
}

function key(runId: string, stageKey: string): string {
  return `${runId}\u0000${stageKey}`;
}

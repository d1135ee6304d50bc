/**
 * The driver's side of messages and prompts, one per run tree: what the
 * engine calls, put together from three parts with one job each.
 *
 * - Stage paths (here): each run's prefix ("" for the root, "review/" for a
 *   child started as "review"), so a stage knows its address.
 * - Before a stage attempt runs (here), `claim` takes its queued messages
 *   (and sticky ones that match) from the journal: they go into the stage
 *   request, written before anything else (a shell stage's stdin). Once it
 *   runs, `running` makes it a target of live delivery.
 * - Live delivery (mail/delivery-pump.ts): a poll (MAIL_POLL_MS) hands what
 *   is queued for running stages to the executor and records it delivered.
 * - Prompts (mail/prompt-waits.ts): which are open, and the steps waiting
 *   for their answers (the same poll; a notification wakes them).
 * - Intercom (mail/broker-link.ts): the tree's sessions with the broker,
 *   when one runs; requests arriving there (mail/requests.ts, validated at
 *   that edge) are acted on here (`onRequest`), the journal first.
 *
 * Nothing here is needed for correctness across crashes: the journal holds
 * every message and answer, and a resumed driver finds them.
 */

import { dirname } from "node:path";
import type { StageMail } from "../journal/messages.ts";
import type { PromptRecord } from "../journal/prompts.ts";
import type { RunStatus } from "../journal/runs.ts";
import type { StageIndexEntry, StageState } from "../journal/stage-index.ts";
import { TERMINAL_STATUSES } from "../journal/runs.ts";
import { matchesPath } from "../intercom/addresses.ts";
import { LeaseLostError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { EVENT } from "./journal-events.ts";
import { LivePublisher } from "../intercom/live.ts";
import { transcriptMark } from "../runners/agent-files.ts";
import { BrokerLink } from "./mail/broker-link.ts";
import { DeliveryPump } from "./mail/delivery-pump.ts";
import { MAIL_POLL_MS, PromptWaits } from "./mail/prompt-waits.ts";
import { StageTools, type ToolStage } from "./mail/stage-tools.ts";
import { StageToolsClient } from "../intercom/stage-tools.ts";
import { setRunToolsPort } from "../runners/run-tools.ts";
import type { DriverRequest } from "./mail/requests.ts";
import { answerPrompt, deliveryStates, sendMessage, type DeliveryView } from "./messaging.ts";
import type { MailTree } from "./mail/mail-tree.ts";

export { MAIL_POLL_MS };

export class TreeMail {
  private readonly prefixes = new Map<string, string>();
  private readonly delivery: DeliveryPump;
  private readonly prompts: PromptWaits;
  private readonly tools: StageTools;
  private link: BrokerLink | undefined;
  private live: LivePublisher | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  private closed = false;
  /** The chain of receipt and attempt-end writes (inOrder). */
  private receipts: Promise<void> = Promise.resolve();

  constructor(private readonly tree: MailTree) {
    this.delivery = new DeliveryPump(tree);
    this.prompts = new PromptWaits(tree);
    this.tools = new StageTools(tree, () => this.pump());
  }

  /**
   * An attempt granted run tools (message, ask_agent, reply) starts: its credential. The tree joins the broker now
   * (the stage's calls come through it), and stages this process runs itself reach it through the same port.
   */
  mintStageToken(stage: ToolStage): string {
    this.start();
    setRunToolsPort(new StageToolsClient(this.home));
    this.tree.executor.serveStageTools?.((token, tool, args) => this.tools.handle(token, tool, args));
    return this.tools.mint(stage);
  }

  revokeStageToken(token: string): void {
    this.tools.revoke(token);
  }

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
    if (!(await this.delivery.anyMail())) return { mail: [], claimed: false };
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
    this.delivery.stageRunning({ runId, stageKey, path, name, attempt });
    this.link?.stageRunning(path);
    if (claimed) return;
    if (!(await this.delivery.anyMail())) return;
    const bound = await this.tree.journal.messages.bindForStage(this.tree.lease, { runId, stageKey, path, name, attempt }, (pattern) => matchesPath(pattern, path));
    if (bound > 0) this.delivery.kick();
  }

  /** The stage's runner reports that a model request carried the message `messageId`: its delivery is received. */
  received(runId: RunId, stageKey: string, attempt: number, messageId: string): void {
    this.inOrder(async () => {
      const n = await this.tree.journal.messages.confirm(this.tree.lease, { runId, stageKey, attempt }, [messageId]);
      if (n.length > 0) this.tree.observer({ type: "message", runId, position: stageKey, stage: this.stagePath(runId, stageKey), messageId, state: "received", live: true, at: Date.now() });
    });
  }

  /**
   * The attempt ended (any way): no more live delivery to it, and what it
   * was handed without a receipt is receipt-unverified (after the receipts
   * its runner reported: they are taken in order).
   */
  ended(runId: RunId, stageKey: string, attempt: number, runner: string): void {
    this.live?.ended(runId, stageKey, attempt);
    const reason =
      runner === "openai"
        ? "the stage ended before a model request carried it"
        : runner === "shell"
          ? "a shell stage's stdin: nothing confirms the command read it"
          : `the ${runner} runner cannot confirm that the model saw it`;
    const path = this.delivery.liveStage(runId, stageKey)?.path;
    // A tree that never saw mail has nothing handed to this attempt: no write.
    if (this.delivery.mailSeen) this.inOrder(async () => {
      const ids = await this.tree.journal.messages.endAttempt(this.tree.lease, { runId, stageKey, attempt }, reason);
      for (const messageId of ids) {
        this.tree.observer({ type: "message", runId, position: stageKey, stage: path ?? stageKey, messageId, state: "receipt-unverified", live: true, reason, at: Date.now() });
      }
    });
    const stage = this.delivery.stageEnded(runId, stageKey);
    if (!stage) return;
    this.link?.stageEnded(stage.path);
    // A delivery that raced the end is settled now rather than at the next poll.
    if (this.delivery.mailSeen) this.delivery.kick();
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

  /** Receipts and attempt ends, one after another (a receipt must land before its attempt's end); errors as settleAll's. */
  private inOrder(op: () => Promise<void>): void {
    this.receipts = this.receipts.then(op).catch((err) => {
      if (err instanceof LeaseLostError) this.tree.stop("lease_lost");
      // otherwise: left delivered; `atomic inbox` shows it so
    });
  }

  private stagePath(runId: RunId, stageKey: string): string {
    return this.delivery.liveStage(runId, stageKey)?.path ?? stageKey;
  }

  private async settleAll(reason: string, prefix?: string): Promise<void> {
    try {
      await this.tree.journal.messages.settleAll(this.tree.lease, this.rootId, reason, prefix);
    } catch (err) {
      if (err instanceof LeaseLostError) this.tree.stop("lease_lost");
      // otherwise: left queued; `atomic inbox` shows it, a later settle takes it
    }
  }

  /** Deliver what is queued for running stages now. */
  pump(): Promise<void> {
    return this.delivery.pump();
  }

  // ---------------------------------------------------------------- prompts

  /** A prompt opens: whether its run, and the tree, had none open before (their status turns awaiting_input). */
  promptOpened(runId: RunId, promptId: string): { runFirst: boolean; treeFirst: boolean } {
    this.start();
    return this.prompts.opened(runId, promptId);
  }

  /** A prompt closed (answered or timed out): whether its run, and the tree, have none open now. */
  promptClosed(promptId: string): { runLast: boolean; treeLast: boolean } {
    return this.prompts.closed(promptId);
  }

  /** Runs with an open prompt (a run stopped while one waits ends awaiting_input, not interrupted). */
  hasOpenPrompt(runId?: RunId): boolean {
    return this.prompts.hasOpen(runId);
  }

  /** Waits until the prompt is answered (or times out at `deadline`); rejects when `signal` aborts. */
  waitForAnswer(promptId: string, deadline: number | null, signal: AbortSignal): Promise<PromptRecord> {
    return this.prompts.waitForAnswer(promptId, deadline, signal);
  }

  // ---------------------------------------------------------------- lifetime and intercom

  /** Starts the poll and joins the broker (if one runs); idempotent. Started on first use, so runs without stages pay nothing. */
  start(): void {
    if (this.timer || this.closed) return;
    this.timer = setInterval(() => this.tick(), MAIL_POLL_MS);
    this.link = new BrokerLink({
      home: this.home,
      rootId: this.rootId,
      onRequest: (request) => this.onRequest(request),
      onMalformed: (line) => this.tree.observer({ type: "warning", runId: this.rootId, message: line, at: Date.now() }),
    });
  }

  /**
   * A sink for the live events of a stage attempt that runs in this process (an in-process executor:
   * pool workers publish their own, intercom/live.ts). Made on first use, closed with the tree's mail.
   */
  livePublisher(runId: string, stage: string, attempt: number, artifactDir: string): (event: { type: string }) => void {
    if (this.closed) return () => {};
    this.live ??= new LivePublisher(this.home);
    // A watcher's mark (docs/design/live-events.md, "Marks") writes the attempt's transcript to disk first.
    return this.live.stage(runId, stage, attempt, () => transcriptMark(artifactDir));
  }

  async close(): Promise<void> {
    this.closed = true;
    this.live?.close();
    this.live = undefined;
    clearInterval(this.timer);
    this.timer = undefined;
    this.link?.close();
    this.link = undefined;
    await this.delivery.close();
    await this.receipts;
    this.prompts.wake();
  }

  private tick(): void {
    if (this.delivery.hasLive || this.delivery.mailSeen) this.delivery.kick();
    if (this.prompts.waiting) this.prompts.wake();
    this.link?.tick();
  }

  /**
   * The delivery states of a message, once none is queued for a started stage any more or `waitMs` has passed:
   * each delivery pass (this driver's poll, a stage starting) is a moment one may have changed.
   */
  private async settled(messageId: string, waitMs: number): Promise<DeliveryView[]> {
    const until = Date.now() + waitMs;
    let states = await deliveryStates(this.tree.journal, this.rootId, messageId);
    while (states.some((d) => d.state === "queued" && d.started) && Date.now() < until && !this.closed) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([this.delivery.nextPass(), new Promise<void>((resolve) => (timer = setTimeout(resolve, until - Date.now())))]);
      clearTimeout(timer);
      states = await deliveryStates(this.tree.journal, this.rootId, messageId);
    }
    return states;
  }

  /** A validated request from intercom (mail/requests.ts); the journal stays the source of truth. */
  private async onRequest(req: DriverRequest): Promise<unknown> {
    const { journal } = this.tree;
    if (req.to === "stage") {
      const run = await journal.getRun(this.rootId);
      const sent = await sendMessage(journal, { run: run!, target: req.target, ...req.message, sender: req.from ?? "intercom" });
      await this.pump();
      return { ok: true, messageId: sent.messageId, deliveries: await deliveryStates(journal, this.rootId, sent.messageId) };
    }
    const r = req.request;
    switch (r.type) {
      case "mail":
        this.delivery.mailSeen = true;
        await this.pump();
        return { ok: true, ...(r.messageId !== undefined ? { deliveries: await this.settled(r.messageId, r.waitMs ?? 0) } : {}) };
      case "answer": {
        const run = await journal.getRun(this.rootId);
        const result = await answerPrompt(journal, run!, r.promptId, r.answer, r.by ?? req.from ?? "intercom");
        this.prompts.wake();
        return { ok: true, status: result.status };
      }
      case "poke":
        this.prompts.wake();
        this.delivery.kick();
        return { ok: true };
      case "control":
        // Not started yet: no control pass to run; the asker looks at the journal instead.
        return this.tree.applyControl ? { ok: true, applied: await this.tree.applyControl() } : { ok: false };
      case "stage_tool":
        return this.tools.handle(r.token, r.tool, r.args);
    }
  }
}

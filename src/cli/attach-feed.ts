/**
 * What feeds `atomic attach`'s model (view/attach-model.ts): the stages to
 * follow, the conversation so far (each stage's transcript), then live:
 * the stage's live events from the broker (intercom/live.ts) and, for a
 * stage on a worker host, relayed over the shared journal, and, polled
 * from the journal every POLL_MS, its attempts and end (a worker lost, the
 * next attempt), the run's end, the delivery states of messages to it and
 * the run's open questions. It also sends what the person types: a
 * message (steer, followUp, interrupt) or an answer, through the same code
 * as `atomic send` and `atomic answer`.
 *
 * A stage a worker host runs whose host is gone (lost: silent longer than
 * ATOMIC_HOST_LOST_MS, or stopped) gets a notice saying so, read from the
 * host registry when the stage is added and every RESCAN_MS: its attempt
 * waits for the host's lease to run out, then the next attempt follows.
 * The host seen holding the attempt is remembered, so a lease taken back
 * from a host gone silent is said too, also when the lease was too short
 * for the host to show lost first. A stage only worker hosts can run that
 * no host holds, with no live host serving its queue, gets the notice
 * `atomic show` gives it ("waiting for a worker on queue …; none seen for
 * N s", journal/fleet-view.ts), again only when that reason changes kind.
 *
 * A run waiting on a question (awaiting_input: a `ctx.ask`, or an agent's
 * `ask_user` that parked its stage) has not ended: its stages stay followed,
 * the question shows with its id, `/answer` answers it and the view follows
 * the stage's next attempt once the run goes on.
 *
 * Nothing here changes the stage: attaching and detaching are reads and a
 * broker subscription.
 */

import { EVENT } from "../engine/journal-events.ts";
import { queueWait, queueWaitText, shownHostState } from "../journal/fleet-view.ts";
import type { HostRecord } from "../journal/fleet.ts";
import { HOST_LOST_MIN_MS } from "../shared/config/environment.ts";
import { answerPrompt, isDriven, notifyDriver, sendMessage } from "../engine/messaging.ts";
import { buildRunReport, type RunReport, type StepReport } from "../engine/run-report.ts";
import { LiveSubscriber, MARK_EVENT, type LiveBatch } from "../intercom/live.ts";
import { JOIN_READ_MS, JOIN_READ_POLL_MS, TranscriptJoin } from "./attach-join.ts";
import type { Journal } from "../journal/journal.ts";
import type { JournalEvent, RunRecord } from "../journal/runs.ts";
import { UsageError } from "../shared/errors.ts";
import type { RunId } from "../shared/ids.ts";
import { StatusSource } from "../status/source.ts";
import { artifactStoreFor } from "../artifacts/select.ts";
import { loadConfig } from "../shared/config/load.ts";
import { isStageEvent } from "../status/stage-stream.ts";
import { takesNoInputWhileRunning } from "../runners/cli-agents/adapters.ts";
import { AttachModel, type StageRef } from "./view/attach-model.ts";

const POLL_MS = 150;
/** How long a run's report serves the transcript reads of stages catching up to their marks. */
const REPORT_REUSE_MS = 100;
/** Without STAGE: how often the run's report is read again for stages that started. */
const RESCAN_MS = 1_000;

interface Found extends StageRef {
  step: StepReport;
  live: boolean;
}

/** A run in one of these is going on (paused, or parked on a question someone may answer here). */
const goingOn = (status: string) => status === "running" || status === "paused" || status === "awaiting_input";

/** Every stage of a report, depth first, with its own run and its path of names. */
function stagesOf(report: RunReport, prefix = ""): Found[] {
  const out: Found[] = [];
  const live = goingOn(report.status);
  for (const step of report.steps) {
    const path = prefix ? `${prefix}/${step.name}` : step.name;
    if (step.kind === "stage") out.push({ runId: report.run.id, position: step.position, path, name: step.name, step, live });
    if (step.child) out.push(...stagesOf(step.child, path));
  }
  return out;
}

const isActive = (f: Found) => f.live && (f.step.status === "running" || f.step.status === "queued" || f.step.status === "waiting");

export class AttachFeed {
  readonly model = new AttachModel();
  private readonly subscriber: LiveSubscriber;
  private readonly source: StatusSource;
  private readonly seqs = new Map<string, number>();
  /** Recent reads of runs' reports (recentReport). */
  private readonly reports = new Map<string, { at: number; report: Promise<RunReport | undefined> }>();
  /** Per followed stage, its live events held until they join its transcript (./attach-join.ts). */
  private readonly joins = new Map<string, TranscriptJoin>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private lastScan = 0;
  private closed = false;
  private runEnded: string | undefined;
  private readonly prompts = new Set<string>();
  /** Gone hosts already said, by stage, attempt and host. */
  private readonly hostsSaid = new Set<string>();
  /** By stage: the queue of its attempt when only worker hosts can run it (RunReport's hostQueue). */
  private readonly hostQueues = new Map<string, string>();
  /** By stage: the host last seen holding its attempt, until the attempt is no host's. */
  private readonly holders = new Map<string, { hostId: string; attempt: number }>();
  /** By stage: the kind of the queue wait last said (fleet-view.ts QueueWait), while it lasts. */
  private readonly waitsSaid = new Map<string, string>();
  private lastHostCheck = 0;
  /** Called once the run, or the one stage followed, ended (once: a stage's end and its run's can come in one poll). */
  onEnded: (status: string) => void = () => {};
  private endSaid = false;

  private constructor(
    private readonly journal: Journal,
    private readonly home: string,
    readonly root: RunRecord,
    /** The stage asked for, or undefined: every active stage. */
    private readonly only: string | undefined,
  ) {
    // Stages on worker hosts: their live events relayed over the shared journal (intercom/live-remote.ts).
    this.subscriber = new LiveSubscriber(home, (b, relayed) => this.onBatch(b, relayed), { role: "attach", remote: journal.fleet?.liveChannel });
    // Their transcripts so far from the artifact store, where the host ships a running stage's files (artifacts/shipper.ts).
    this.source = new StatusSource(journal, { artifacts: artifactStoreFor(journal, loadConfig({ home }).config) });
  }

  /**
   * Resolves what to follow and reads the conversation so far. Throws a UsageError for a stage the run
   * does not have, or when the run has no stage to follow. `pathPrefix`: for a child run, the path of the
   * step that started it (messages address stages by their path from the root).
   */
  static async open(journal: Journal, home: string, run: RunRecord, stage: string | undefined, opts: { pathPrefix?: string } = {}): Promise<AttachFeed> {
    const root = run.parentId ? ((await journal.getRun(run.rootId)) ?? run) : run;
    const feed = new AttachFeed(journal, home, root, stage);
    const report = await buildRunReport(journal, run.id);
    if (!report) throw new UsageError("unknown_run", `no run with id ${run.id}`, { hint: "list runs with: atomic runs" });
    // A child run's stages are addressed from the root: their paths start with the step that started the child.
    const stages = stagesOf(report, opts.pathPrefix ?? "");
    let targets: Found[];
    if (stage !== undefined) {
      const exact = stages.filter((f) => f.runId === run.id && f.position === stage);
      const byPath = stages.filter((f) => f.path === stage);
      const byName = stages.filter((f) => f.name === stage);
      targets = exact.length ? exact : byPath.length ? byPath : byName;
      if (targets.length === 0) {
        const names = [...new Set(stages.map((f) => f.path))];
        throw new UsageError("unknown_stage", `run ${run.id} has no stage ${JSON.stringify(stage)}`, {
          hint: names.length ? `its stages: ${names.slice(0, 8).join(", ")}${names.length > 8 ? ", …" : ""}` : "it has not started a stage yet; attach without STAGE to follow the stages as they start",
        });
      }
      if (targets.length > 1) {
        throw new UsageError("ambiguous_stage", `${targets.length} stages of run ${run.id} are named ${JSON.stringify(stage)}`, { hint: `name one by its path: ${targets.map((t) => t.path).join(", ")}` });
      }
    } else {
      targets = stages.filter(isActive);
      if (targets.length === 0 && !goingOn(report.status)) {
        throw new UsageError("run_ended", `run ${run.id} is ${report.status}: no stage of it is running`, { hint: `attach to one of its stages to read its conversation: atomic attach ${run.id} STAGE` });
      }
    }
    for (const t of targets) await feed.add(t);
    await feed.checkHosts().catch(() => {}); // the registry unreadable now: the next poll reads it again
    return feed;
  }

  /** Follows one more stage: subscribes, reads its transcript, says how it stands. */
  private async add(f: Found): Promise<void> {
    if (!this.model.follow(f)) return;
    const key = AttachModel.key(f);
    const attempt = Math.max(1, f.step.attempts);
    if (f.step.hostQueue) this.hostQueues.set(key, f.step.hostQueue);
    const join = new TranscriptJoin(attempt, {
      deliver: (b, after) => this.deliver(b, after),
      ask: () => this.subscriber.mark([f.runId]),
      rest: (from, to) => this.transcriptRange(f, attempt, from, to),
      more: (text) => this.model.add(f, { kind: "transcript", text, attempt, more: true }),
      live: () => {
        if (!this.model.ended(f)) this.model.add(f, { kind: "live", attempt });
      },
      done: () => {
        if (this.joins.get(key) === join) this.joins.delete(key);
      },
    });
    this.joins.set(key, join);
    await this.subscriber.watch([...new Set(this.model.followed.map((r) => r.runId))]);
    if (f.step.status === "running") this.model.markStarted(f, attempt);
    const ended = !f.live || f.step.status === "completed" || f.step.status === "failed" || f.step.status === "stopped";
    this.model.add(f, { kind: "attached", status: f.live ? f.step.status : `${f.step.status} (run ${this.root.status})`, attempt, live: !ended });
    if (!ended && takesNoInputWhileRunning(f.step.runner)) {
      this.model.add(f, {
        kind: "notice",
        text: `${f.step.runner} takes no input while its turn runs: a steer or /followup typed here waits for the turn's end, then resumes its session with it; /interrupt ends the turn first`,
      });
    }
    const readAt = Date.now();
    const { text, bytes } = await this.transcript(f, attempt);
    if (text) {
      this.model.add(f, { kind: "transcript", text, attempt });
      // A transcript means the attempt's runner had started, even while the journal still says queued (a worker's
      // events reach it in batches): a second start of this attempt is then a worker lost, not the first.
      this.model.markStarted(f, attempt);
    }
    if (ended) join.close();
    else join.read(bytes, readAt);
    if (ended) this.model.add(f, { kind: "state", state: "ended", attempt, status: f.step.status, text: `the stage ended: ${f.step.status}` });
    // The journal from here on: its events after what the report was built from.
    if (!this.seqs.has(f.runId)) {
      const run = await this.journal.getRun(f.runId as RunId);
      this.seqs.set(f.runId, run?.lastSeq ?? 0);
    }
  }

  /** The attempt's transcript as it is now, and its bytes. */
  private async transcript(f: Found, attempt: number): Promise<{ text: string; bytes: number }> {
    const run = await this.journal.getRun(f.runId as RunId);
    let text = "";
    let offset = 0;
    for (let i = 0; run && i < 64; i++) {
      const t = await this.source.transcript(run, f.position, { attempt, stdout: offset, stderr: 0 }).catch(() => undefined);
      if (!t || "miss" in t) break;
      text += t.stdout.text;
      offset = t.stdout.next;
      if (!t.stdout.more) break;
    }
    return { text, bytes: offset };
  }

  /**
   * The attempt's transcript from byte `from` to byte `to` (a mark's), once the file or the artifact store holds
   * that much (a worker host ships it when it relays the mark); undefined if it does not within JOIN_READ_MS.
   */
  private async transcriptRange(f: Found, attempt: number, from: number, to: number): Promise<string | undefined> {
    const run = await this.journal.getRun(f.runId as RunId);
    if (!run) return undefined;
    const until = Date.now() + JOIN_READ_MS;
    let text = "";
    let offset = from;
    while (offset < to && !this.closed) {
      const known = await this.recentReport(run.id);
      const t = await this.source.transcript(run, f.position, { attempt, stdout: offset, stderr: 0, stdoutEnd: to }, known).catch(() => undefined);
      const got = t && !("miss" in t) ? t.stdout : undefined;
      if (got && got.next > offset) {
        text += got.text;
        offset = got.next;
        continue;
      }
      if (Date.now() >= until) return undefined;
      await Bun.sleep(JOIN_READ_POLL_MS); // not there yet: the host's shipping of it is on its way
    }
    return offset >= to ? text : undefined;
  }

  /**
   * The run's report, read at most once per REPORT_REUSE_MS: the stages that catch up at once (each reading its
   * transcript up to its mark) share one read of the journal instead of one each.
   */
  private recentReport(runId: string): Promise<RunReport | undefined> {
    const hit = this.reports.get(runId);
    if (hit && Date.now() - hit.at < REPORT_REUSE_MS) return hit.report;
    const report = buildRunReport(this.journal, runId as RunId).catch(() => undefined);
    this.reports.set(runId, { at: Date.now(), report });
    return report;
  }

  /** Starts the live part (the journal poll); the broker subscription is up already. */
  start(): void {
    this.tick();
  }

  private onBatch(b: LiveBatch, relayed: boolean): void {
    const join = this.joins.get(AttachModel.key({ runId: b.runId, position: b.stage }));
    if (join) join.batch(b, relayed);
    else this.deliver(b, 0);
  }

  private deliver(b: LiveBatch, after: number): void {
    const ref = { runId: b.runId, position: b.stage };
    if (!this.model.has(ref)) return;
    for (const e of b.events) if (e.at >= after && e.type !== MARK_EVENT) this.model.addLive(ref, b.attempt, e);
  }

  private tick(): void {
    if (this.closed) return;
    void this.poll()
      .catch(() => {}) // a busy journal: the next tick reads again
      .finally(() => {
        if (!this.closed) this.timer = setTimeout(() => this.tick(), POLL_MS);
      });
  }

  private async poll(): Promise<void> {
    for (const [runId, seq] of this.seqs) {
      const events = await this.journal.readEvents(runId as RunId, seq, 500);
      for (const e of events) this.onJournal(e);
      if (events.length) this.seqs.set(runId, events.at(-1)!.seq);
    }
    await this.pollMessages();
    if (Date.now() - this.lastHostCheck >= RESCAN_MS) await this.checkHosts();
    if (this.only === undefined && !this.runEnded && Date.now() - this.lastScan >= RESCAN_MS) {
      this.lastScan = Date.now();
      const report = await buildRunReport(this.journal, this.root.id);
      for (const f of report ? stagesOf(report).filter(isActive) : []) if (!this.model.has(f)) await this.add(f);
    }
  }

  private ended(status: string): void {
    if (this.endSaid) return;
    this.endSaid = true;
    this.onEnded(status);
  }

  private onJournal(e: JournalEvent): void {
    const p = (e.payload ?? {}) as Record<string, unknown>;
    if (e.runId === this.root.id && e.type === EVENT.statusChanged && typeof p.to === "string" && !goingOn(p.to)) {
      this.runEnded = p.to;
      const active = this.model.active;
      const focus = this.model.focus;
      for (const ref of active.length ? active : focus ? [focus] : []) this.model.add(ref, { kind: "state", state: "ended", attempt: 0, status: p.to, text: `the run ended: ${p.to}` });
      this.ended(p.to);
      return;
    }
    for (const ref of this.model.followed) {
      if (ref.runId !== e.runId || !isStageEvent(e, ref.position)) continue;
      const attempt = typeof p.attempt === "number" ? p.attempt : 1;
      if (e.type === EVENT.stepStarted && e.key === ref.position) {
        if (p.queued && typeof p.hostQueue === "string") this.hostQueues.set(AttachModel.key(ref), p.hostQueue);
        else this.hostQueues.delete(AttachModel.key(ref));
        this.model.add(ref, { kind: "state", state: "attempt_started", attempt, text: `attempt ${attempt} started` });
      } else if (e.type === EVENT.stepFailed && e.key === ref.position) {
        const error = (p.error ?? {}) as { code?: string; message?: string };
        const lost = error.code === "worker_lost";
        this.model.add(ref, { kind: "state", state: lost ? "worker_lost" : "attempt_failed", attempt, text: lost ? `worker lost: ${error.message ?? "its worker went away"}; the stage's next attempt follows` : `attempt ${attempt} failed: ${error.message ?? error.code ?? "unknown error"}` });
      } else if (e.type === EVENT.checkpoint && e.key === ref.position) {
        const status = String((p.result as { status?: string } | undefined)?.status ?? "completed");
        this.model.add(ref, { kind: "state", state: "ended", attempt, status, text: `the stage ended: ${status}` });
        if (this.only !== undefined) this.ended(status);
      }
    }
  }

  /**
   * Followed stages and the worker hosts of their attempts: a host that holds an attempt and is gone, or whose
   * lease on it was taken back while it was silent, gets one notice per attempt and host; a stage no host holds
   * that waits for a host serving its queue gets the queue wait's notice when its kind changes.
   */
  private async checkHosts(): Promise<void> {
    this.lastHostCheck = Date.now();
    const fleet = this.journal.fleet;
    const active = this.model.active;
    if (!fleet || active.length === 0) return;
    const work = (await fleet.hostWork()).filter((w) => w.rootId === this.root.id);
    const keys = active.map((ref) => AttachModel.key(ref));
    if (work.length === 0 && !keys.some((k) => this.holders.has(k) || this.hostQueues.has(k))) return;
    const list = await fleet.hosts();
    const hosts = new Map(list.map((h) => [h.hostId, h]));
    const now = Date.now();
    active.forEach((ref, i) => {
      const key = keys[i]!;
      const w = work.find((x) => x.runId === ref.runId && x.stageKey === ref.position);
      if (w) {
        this.holders.set(key, { hostId: w.hostId, attempt: w.attempt });
        this.waitsSaid.delete(key);
        const host = hosts.get(w.hostId);
        const state = host ? shownHostState(host) : "lost";
        if (state === "lost" || state === "stopped") this.hostGone(ref, w.hostId, w.attempt, host, false);
        return;
      }
      const held = this.holders.get(key);
      this.holders.delete(key);
      const host = held && hosts.get(held.hostId);
      // Its lease taken back from a host that stopped renewing it: gone, though maybe not yet shown lost.
      if (held && (!host || host.state === "stopped" || host.silentMs >= HOST_LOST_MIN_MS)) this.hostGone(ref, held.hostId, held.attempt, host, true);
      const queue = this.hostQueues.get(key);
      const why = queue === undefined ? undefined : queueWait(list, queue, now);
      if (why && why.kind !== this.waitsSaid.get(key)) this.model.add(ref, { kind: "notice", text: queueWaitText(why, now) });
      if (why) this.waitsSaid.set(key, why.kind);
      else this.waitsSaid.delete(key);
    });
  }

  /** The one notice of a gone host, said once per stage, attempt and host: while it holds the attempt, or once its lease was taken back. */
  private hostGone(ref: StageRef, hostId: string, attempt: number, host: HostRecord | undefined, leaseOver: boolean): void {
    const said = `${ref.runId}:${ref.position}:${attempt}:${hostId}`;
    if (this.hostsSaid.has(said)) return;
    this.hostsSaid.add(said);
    const how = host?.state === "stopped" ? "stopped" : `silent for ${Math.round((host?.silentMs ?? 0) / 1000)} s`;
    const next = leaseOver ? "its lease ran out, so" : "once its lease runs out";
    this.model.add(ref, {
      kind: "notice",
      text: `worker host ${hostId}, which runs attempt ${attempt} of this stage, is gone (${how}); ${next} the stage's next attempt starts elsewhere and this view follows it (hint: atomic workers lists the hosts)`,
    });
  }

  private async pollMessages(): Promise<void> {
    const { messages, deliveries } = await this.journal.messages.messagesOf(this.root.id as RunId);
    const byId = new Map(messages.map((m) => [m.id, m]));
    for (const ref of this.model.followed) {
      for (const d of deliveries) {
        if (d.stagePath !== ref.path) continue;
        const m = byId.get(d.messageId);
        if (!m) continue;
        this.model.add(ref, { kind: "message", id: m.id, mode: m.mode, text: m.text, state: d.state, ...(d.reason ? { reason: d.reason } : {}), mine: this.model.sent.has(m.id) });
      }
    }
    const focus = this.model.focus;
    if (!focus) return;
    for (const q of await this.journal.messages.prompts(this.root.id as RunId, "open")) {
      if (this.prompts.has(q.id)) continue;
      this.prompts.add(q.id);
      const choices = q.choices?.length ? ` (${q.choices.join(" / ")})` : "";
      this.model.add(focus, { kind: "notice", text: `question ${q.id}: ${q.question}${choices}; answer with /answer ${q.id} TEXT` });
    }
  }

  /** Sends a message to the focused stage: what the journal recorded (the delivery state follows from the poll). */
  async send(text: string, mode: "steer" | "followUp" | "interrupt"): Promise<void> {
    const ref = this.model.focus;
    if (!ref) throw new UsageError("no_stage", "no stage is followed now", { hint: "wait for a stage to start, or /detach" });
    const sent = await sendMessage(this.journal, { run: this.root, target: ref.path, text, mode, sender: "attach" });
    this.model.sent.add(sent.messageId);
    const d = sent.deliveries.find((x) => x.stage === ref.path);
    this.model.add(ref, { kind: "message", id: sent.messageId, mode, text, state: d?.state ?? "queued", mine: true });
    if (await isDriven(this.journal, this.root.id as RunId)) await notifyDriver(this.home, this.root.id as RunId, { type: "mail", messageId: sent.messageId });
    await this.pollMessages();
  }

  async answer(question: string, text: string): Promise<void> {
    const result = await answerPrompt(this.journal, this.root, question, text, "attach");
    if (result.status === "answered" && (await isDriven(this.journal, result.runId))) await notifyDriver(this.home, result.runId, { type: "poke" }, 1_000);
    const ref = this.model.focus;
    if (ref) this.model.add(ref, { kind: "answer", question: result.promptId, status: result.status, text: String(result.prompt.answer ?? text) });
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    for (const join of [...this.joins.values()]) join.close();
    this.subscriber.close();
  }
}

/**
 * One shared poller per streamed run: reads the journal for new events of
 * the run and of its child runs (written by another process, so polled,
 * every `pollMs`) and fans each one out, formatted once, to every client.
 *
 * Every message carries the stream cursor after it as its SSE `id`
 * (stream-cursor.ts), so a client that reconnects with `Last-Event-ID`
 * gets exactly the events after that message: none missed, none twice.
 *
 * All work happens in `tick()`, one at a time, in this order: poll new
 * events (the feed's cursor V moves forward), then let waiting clients
 * join. A joining client at cursor C first receives the events between C
 * and V, read from the journal, then a `ready` message, then joins the live
 * set, which receives every later tick's events. Because nothing else runs
 * between the catch-up and the join, nothing falls in between.
 *
 * Children are discovered from their parent's events (the `step_started`
 * that names the child run), which the stream delivers before any event of
 * the child. A run that ended is polled only when something else in the
 * tree moved, or every `settledEvery` ticks (a resumed grandchild may move
 * while its ancestors are quiet).
 *
 * Live events (model deltas, tool calls, usage, output: intercom/live.ts)
 * of every run of the tree, the root's and each child's from when the feed
 * learns of it, go to the clients that have had their `ready`, as
 * `event: live` without an id: they are not stored, so a client that
 * reconnects gets the journal events it missed but not these (a stage's
 * transcript has their text), as on a stage's stream (stage-stream.ts).
 *
 * A client whose backlog grows past its limit is dropped: it reconnects
 * with its last id and catches up from the journal, so a slow reader never
 * holds memory hostage.
 */

import { EVENT, type StatusChangedPayload, type StepStartedPayload } from "../engine/journal-events.ts";
import type { Journal } from "../journal/journal.ts";
import type { JournalEvent } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import type { LiveBatch } from "../intercom/live.ts";
import type { LiveHub } from "./live-hub.ts";
import { formatCursor, type TreeCursor } from "./stream-cursor.ts";

export interface FeedClient {
  /** Queue bytes for the client; false when its backlog is too large (it is then dropped). */
  write(bytes: Uint8Array): boolean;
  close(): void;
}

export interface FeedOptions {
  pollMs: number;
  heartbeatMs: number;
  /** Ticks between polls of runs that ended (when nothing else moved). */
  settledEvery: number;
  /** Close the feed after this long without clients. */
  idleCloseMs: number;
}

export type StartAt = "start" | "now" | TreeCursor;

interface FeedRun {
  runId: RunId;
  path: string;
  seq: number;
  children: number;
  ended: boolean;
}

const PAGE = 500;
const encoder = new TextEncoder();

export class TreeFeed {
  private readonly runs: FeedRun[] = [];
  private readonly byId = new Map<string, FeedRun>();
  private readonly byPath = new Map<string, FeedRun>();
  private readonly paths: string[] = [];
  private readonly clients = new Set<FeedClient>();
  private joins: { client: FeedClient; from: StartAt }[] = [];
  private ticks = 0;
  private lastWrite = Date.now();
  private current: Promise<void> = Promise.resolve();
  private wake: (() => void) | undefined;
  private idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** The live subscriptions of the tree's runs, ended with the feed. */
  private readonly unlisten: (() => void)[] = [];
  closed = false;

  private constructor(
    private readonly journal: Journal,
    readonly rootId: RunId,
    private readonly opts: FeedOptions,
    private readonly onClosed: (feed: TreeFeed) => void,
    private readonly live: LiveHub | undefined,
  ) {}

  /** A feed positioned at the journal's current end for `rootId` and its children (with `live`, their live events too). */
  static async open(journal: Journal, rootId: RunId, opts: FeedOptions, onClosed: (feed: TreeFeed) => void, live?: LiveHub): Promise<TreeFeed> {
    const feed = new TreeFeed(journal, rootId, opts, onClosed, live);
    // The root's live events are subscribed before any client joins (a child's, from when the feed learns of it).
    await feed.register(rootId, "");
    await feed.poll(true, () => {});
    feed.armIdleClose();
    void feed.loop();
    return feed;
  }

  /** Why a cursor cannot resume this stream, or undefined when it can. */
  checkCursor(from: StartAt): string | undefined {
    if (from === "start" || from === "now") return undefined;
    for (const [path, seq] of from) {
      const run = this.byPath.get(path);
      if (!run) return `the cursor names a child run (${path}) this run does not have`;
      if (seq > run.seq) return `the cursor is ahead of the journal (${path || "root"} at ${seq}, journal at ${run.seq})`;
    }
    return undefined;
  }

  /** Queue a client; it joins at the next tick (at once when the feed is idle). */
  join(client: FeedClient, from: StartAt): void {
    clearTimeout(this.idleTimer);
    this.joins.push({ client, from });
    this.wake?.();
  }

  leave(client: FeedClient): void {
    this.clients.delete(client);
    this.joins = this.joins.filter((j) => j.client !== client);
    if (this.clients.size === 0 && this.joins.length === 0) this.armIdleClose();
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** Runs one more tick (so the latest events go out), then closes every client. */
  async drainAndClose(): Promise<void> {
    if (this.closed) return;
    await this.runTick().catch(() => {});
    this.close();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.idleTimer);
    this.wake?.();
    for (const c of [...this.clients, ...this.joins.map((j) => j.client)]) c.close();
    this.clients.clear();
    this.joins = [];
    for (const un of this.unlisten.splice(0)) un();
    this.onClosed(this);
  }

  // ---------------------------------------------------------------- the loop

  private async loop(): Promise<void> {
    while (!this.closed) {
      await this.runTick().catch(() => {
        // A failed read (a busy or briefly unavailable journal) is retried at the next tick.
      });
      if (this.closed) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.opts.pollMs);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wake = undefined;
    }
  }

  /** Ticks never overlap: each waits for the one before. */
  private runTick(): Promise<void> {
    const next = this.current.then(() => this.tick());
    this.current = next.catch(() => {});
    return next;
  }

  private async tick(): Promise<void> {
    if (this.closed) return;
    this.ticks++;
    const settled = this.ticks % this.opts.settledEvery === 0;
    if (this.clients.size > 0 || this.joins.length > 0) {
      await this.poll(settled, (bytes) => this.broadcast(bytes));
    }
    for (const { client, from } of this.joins.splice(0)) await this.admit(client, from);
    if (this.clients.size > 0 && Date.now() - this.lastWrite >= this.opts.heartbeatMs) this.broadcast(encoder.encode(": heartbeat\n\n"));
  }

  /** Reads new events of every run that may have moved; `emit` gets each formatted message. */
  private async poll(all: boolean, emit: (bytes: Uint8Array) => void): Promise<void> {
    let moved = false;
    for (let i = 0; i < this.runs.length; i++) {
      const run = this.runs[i]!;
      if (i > 0 && run.ended && !all && !moved) continue;
      for (;;) {
        const events = await this.journal.readEvents(run.runId, run.seq, PAGE);
        for (const e of events) {
          this.apply(run, e);
          emit(this.message(e, run.path, formatCursor(this.paths, (p) => this.byPath.get(p)!.seq)));
        }
        if (events.length > 0) moved = true;
        if (events.length < PAGE) break;
      }
    }
  }

  /** Sends a client the events between its cursor and the feed's, then lets it join the live set. */
  private async admit(client: FeedClient, from: StartAt): Promise<void> {
    const cursor: TreeCursor = new Map();
    if (from === "now") for (const r of this.runs) cursor.set(r.path, r.seq);
    else if (from !== "start") for (const [p, s] of from) cursor.set(p, s);
    const seqOf = (p: string) => cursor.get(p) ?? 0;
    for (const run of this.runs) {
      let at = seqOf(run.path);
      while (at < run.seq) {
        const events = await this.journal.readEvents(run.runId, at, Math.min(PAGE, run.seq - at));
        if (events.length === 0) break;
        for (const e of events) {
          cursor.set(run.path, e.seq);
          if (!client.write(this.message(e, run.path, formatCursor(this.paths, seqOf)))) return client.close();
        }
        at = events.at(-1)!.seq;
      }
    }
    const id = formatCursor(this.paths, (p) => this.byPath.get(p)!.seq);
    const runs = this.runs.map((r) => ({ runId: r.runId, path: r.path, seq: r.seq }));
    if (!client.write(encoder.encode(`id: ${id}\nevent: ready\ndata: ${JSON.stringify({ cursor: id, runs })}\n\n`))) return client.close();
    if (this.closed) return client.close();
    this.clients.add(client);
  }

  private broadcast(bytes: Uint8Array): void {
    this.lastWrite = Date.now();
    for (const c of this.clients) {
      if (!c.write(bytes)) {
        this.clients.delete(c);
        c.close();
      }
    }
    if (this.clients.size === 0 && this.joins.length === 0) this.armIdleClose();
  }

  private message(e: JournalEvent, path: string, id: string): Uint8Array {
    const data = JSON.stringify({ runId: e.runId, path, seq: e.seq, type: e.type, key: e.key, at: e.at, payload: e.payload });
    return encoder.encode(`id: ${id}\nevent: journal\ndata: ${data}\n\n`);
  }

  // ---------------------------------------------------------------- the tree

  private apply(run: FeedRun, e: JournalEvent): void {
    run.seq = e.seq;
    const p = e.payload as Partial<StepStartedPayload & StatusChangedPayload> | null;
    if ((e.type === EVENT.stepStarted || e.type === EVENT.checkpoint) && p?.kind === "child" && typeof p.childRunId === "string") {
      if (!this.byId.has(p.childRunId)) void this.register(p.childRunId as RunId, run.path === "" ? String(run.children++) : `${run.path}.${run.children++}`);
    } else if (e.type === EVENT.statusChanged && p?.to) {
      run.ended = p.to !== "running";
    } else if (e.type === EVENT.runResumed) {
      run.ended = false;
    }
  }

  private register(runId: RunId, path: string): Promise<void> {
    const run: FeedRun = { runId, path, seq: 0, children: 0, ended: false };
    this.runs.push(run);
    this.byId.set(runId, run);
    this.byPath.set(path, run);
    this.paths.push(path);
    if (!this.live) return Promise.resolve();
    return this.live.listen(runId, (b) => this.onLive(b, path)).then((un) => {
      if (this.closed) un();
      else this.unlisten.push(un);
    });
  }

  /** A live batch of one of the tree's runs, to the clients past their catch-up (no id: not resumable). */
  private onLive(b: LiveBatch, path: string): void {
    if (this.closed || this.clients.size === 0) return;
    const bytes = encoder.encode(`event: live\ndata: ${JSON.stringify({ runId: b.runId, path, stage: b.stage, attempt: b.attempt, events: b.events })}\n\n`);
    this.lastWrite = Date.now();
    for (const c of this.clients) {
      if (!c.write(bytes)) {
        this.clients.delete(c);
        c.close();
      }
    }
  }

  private armIdleClose(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      if (this.clients.size === 0 && this.joins.length === 0) this.close();
    }, this.opts.idleCloseMs);
    this.idleTimer.unref?.();
  }
}

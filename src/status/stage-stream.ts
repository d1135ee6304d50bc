/**
 * `GET /api/runs/:id/stages/:path/stream`: one stage as server-sent events.
 *
 * Two sources, one stream (docs/design/live-events.md):
 * - `event: journal`: the journal's events of the stage (its key, or its
 *   `stageKey`: starts, attempts, results, message deliveries) and of its
 *   run's status, each with its seq as the SSE `id`. Durable: a client that
 *   reconnects with `Last-Event-ID` (even to a restarted server) gets exactly
 *   the events after that seq, none missed, none twice.
 * - `event: live`: the stage's live events from the broker (model deltas,
 *   tool calls with arguments and results, usage, output), without an `id`:
 *   they are not stored, so a reconnecting client does not get the ones it
 *   missed (the stage's transcript has their text). They start after the
 *   `ready` message that ends the catch-up.
 *
 * The journal part is polled every `pollMs` per client (a stage stream
 * reads one run's new events, a cheap indexed read); the live part is the
 * server's one broker subscription (live-hub.ts).
 */

import { EVENT } from "../engine/journal-events.ts";
import type { LiveBatch } from "../intercom/live.ts";
import type { Journal } from "../journal/journal.ts";
import type { JournalEvent } from "../journal/runs.ts";
import type { RunId } from "../shared/ids.ts";
import type { LiveHub } from "./live-hub.ts";

export interface StageTarget {
  runId: RunId;
  position: string;
  name: string;
}

export interface StageStreamOptions {
  pollMs: number;
  heartbeatMs: number;
  maxBacklogBytes: number;
}

/** Run-wide events a stage stream carries besides the stage's own. */
const RUN_EVENTS = new Set<string>([EVENT.runStarted, EVENT.runResumed, EVENT.statusChanged, EVENT.recoveryStopped, EVENT.controlApplied]);
const PAGE = 500;
const encoder = new TextEncoder();

/** True when `e` belongs on the stream of the stage at `position`. */
export function isStageEvent(e: JournalEvent, position: string): boolean {
  if (e.key === position) return true;
  if (RUN_EVENTS.has(e.type)) return true;
  return (e.payload as { stageKey?: unknown } | null)?.stageKey === position;
}

/** The run's last seq (for `from=now` and to check a cursor). */
async function lastSeqOf(journal: Journal, runId: RunId, known: number): Promise<number> {
  let at = known;
  for (;;) {
    const events = await journal.readEvents(runId, at, PAGE);
    if (events.length === 0) return at;
    at = events.at(-1)!.seq;
    if (events.length < PAGE) return at;
  }
}

/** Why `cursor` cannot resume the stream, or undefined. */
export async function checkStageCursor(journal: Journal, runId: RunId, knownLastSeq: number, cursor: number): Promise<string | undefined> {
  const last = await lastSeqOf(journal, runId, knownLastSeq);
  return cursor > last ? `the cursor is ahead of the journal (at ${cursor}, the run's journal at ${last})` : undefined;
}

export function openStageStream(
  journal: Journal,
  live: LiveHub,
  target: StageTarget,
  from: "start" | "now" | number,
  knownLastSeq: number,
  opts: StageStreamOptions,
  signal?: AbortSignal,
): { stream: ReadableStream<Uint8Array>; stop(): void } {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let done = false;
  let unlisten: () => void = () => {};
  let wake: (() => void) | undefined;
  let lastWrite = Date.now();

  const stop = () => {
    if (done) return;
    done = true;
    unlisten();
    wake?.();
    try {
      controller.close();
    } catch {
      // already closed or cancelled by the reader
    }
  };
  const write = (text: string) => {
    if (done) return;
    lastWrite = Date.now();
    controller.enqueue(encoder.encode(text));
    if ((controller.desiredSize ?? 0) < -opts.maxBacklogBytes) stop(); // too far behind: it reconnects and catches up
  };
  const journalMessage = (e: JournalEvent) =>
    `id: ${e.seq}\nevent: journal\ndata: ${JSON.stringify({ runId: e.runId, seq: e.seq, type: e.type, key: e.key, at: e.at, payload: e.payload })}\n\n`;
  const liveMessage = (b: LiveBatch) => `event: live\ndata: ${JSON.stringify({ runId: b.runId, stage: b.stage, attempt: b.attempt, events: b.events })}\n\n`;

  const run = async () => {
    let ready = false;
    const early: LiveBatch[] = [];
    unlisten = await live.listen(target.runId, (b) => {
      if (b.stage !== target.position || done) return;
      if (ready) write(liveMessage(b));
      else early.push(b);
    });
    if (done) return unlisten();
    let seq = from === "start" ? 0 : from === "now" ? await lastSeqOf(journal, target.runId, knownLastSeq) : from;
    const catchUp = async () => {
      for (;;) {
        const events = await journal.readEvents(target.runId, seq, PAGE);
        for (const e of events) if (isStageEvent(e, target.position)) write(journalMessage(e));
        if (events.length > 0) seq = events.at(-1)!.seq;
        if (events.length < PAGE || done) return;
      }
    };
    await catchUp();
    write(`id: ${seq}\nevent: ready\ndata: ${JSON.stringify({ ...target, seq })}\n\n`);
    for (const b of early.splice(0)) write(liveMessage(b));
    ready = true;
    while (!done) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, opts.pollMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      if (done) break;
      await catchUp().catch(() => {}); // a busy journal: next tick
      if (Date.now() - lastWrite >= opts.heartbeatMs) write(": heartbeat\n\n");
    }
  };

  const stream = new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c;
        c.enqueue(encoder.encode("retry: 1000\n: stream open\n\n"));
        void run().catch(() => stop());
      },
      cancel() {
        stop();
      },
    },
    { highWaterMark: 64 * 1024, size: (chunk) => chunk?.byteLength ?? 0 },
  );
  signal?.addEventListener("abort", stop, { once: true });
  return { stream, stop };
}

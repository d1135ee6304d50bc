/**
 * Live stage events from other machines (docs/design/live-events.md,
 * "Worker hosts"): a stage a worker host runs publishes on the broker of
 * the host's own home, which a watcher elsewhere cannot reach. Over a
 * shared journal's notification channel (shared/live-channel.ts) the
 * watcher asks for the runs it watches, again every WATCH_RENEW_MS, and
 * each host relays the live batches of those runs (fleet/live-relay.ts)
 * until WATCH_KEEP_MS after the last ask. The watcher hands relayed batches
 * to the same place as its broker's.
 *
 * - A relayed body is `{ f, bs }`: `f` the relaying home's key
 *   (liveHomeKey), `bs` live batches, of one or more stage attempts, that
 *   together fit the channel (packBatches). A watcher drops bodies from its
 *   own home: its broker brought them already.
 * - A lost connection is opened again after a back-off; what was relayed
 *   meanwhile is missed, as a broker's live events are while one is away
 *   (the journal and the stage's files keep the durable record).
 */

import { hostname } from "node:os";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import { LIVE_BODY_MAX, type LiveChannel, type LiveChannelOpener } from "../shared/live-channel.ts";
import type { LiveBatch, LiveEvent } from "./live-batch.ts";
import { intercomPaths } from "./paths.ts";

/** How often a watcher asks again for the runs it watches. */
export const WATCH_RENEW_MS = 2_000;
/** How long a relay goes on relaying a run after the last ask for it (a watcher that left stops costing soon). */
export const WATCH_KEEP_MS = 3 * WATCH_RENEW_MS;
/** Opening the channel again after its connection was lost. */
const REOPEN: Backoff = { firstMs: 250, maxMs: 5_000, jitter: 0.2 };
/** A tool's input or output longer than this is cut in a relayed event (the stage's files keep it whole). */
const FIELD_MAX = 2_000;

/** Which home a relayed body comes from: this machine's name and the home's broker socket. */
export function liveHomeKey(home: string): string {
  return Bun.hash(`${hostname()}\u0000${intercomPaths(home).socket}`).toString(36);
}

/**
 * Batches as bodies of at most LIVE_BODY_MAX bytes each, in order: the
 * batches of several stage attempts share a body while they fit (a relay
 * sends what waits for every stage in one notification, not one stage's
 * after another's), a long text is cut across bodies, a long tool input or
 * output is cut to FIELD_MAX characters.
 */
export function packBatches(batches: readonly LiveBatch[], from: string): string[] {
  const frame = Buffer.byteLength(JSON.stringify({ f: from, bs: [] }));
  const bodies: string[] = [];
  let pieces: LiveBatch[] = [];
  let used = frame;
  let open: LiveBatch | undefined; // the piece of the current batch in the body being filled
  const flush = () => {
    if (pieces.length) bodies.push(JSON.stringify({ f: from, bs: pieces }));
    pieces = [];
    used = frame;
    open = undefined;
  };
  for (const batch of batches) {
    const head: LiveBatch = { live: 1, runId: batch.runId, stage: batch.stage, attempt: batch.attempt, events: [] };
    const headSize = Buffer.byteLength(JSON.stringify(head)) + 1; // and the comma between pieces
    /** The most one event may take: alone in a body with its batch's head. */
    const room = LIVE_BODY_MAX - frame - headSize - 1;
    const add = (e: LiveEvent) => {
      const size = Buffer.byteLength(JSON.stringify(e)) + 1;
      if (used + size + (open ? 0 : headSize) > LIVE_BODY_MAX) flush();
      if (!open) {
        open = { ...head, events: [] };
        pieces.push(open);
        used += headSize;
      }
      open.events.push(e);
      used += size;
    };
    open = undefined;
    for (const e of batch.events) {
      if (Buffer.byteLength(JSON.stringify(e)) + 1 <= room) add(e);
      else if (typeof e.text === "string") {
        // Six bytes a character at most once escaped: each piece fits whatever it holds.
        const step = Math.max(1, Math.floor((room - Buffer.byteLength(JSON.stringify({ ...e, text: "" }))) / 6));
        for (let i = 0; i < e.text.length; i += step) add({ ...e, text: e.text.slice(i, i + step) });
      } else add(cut(e));
    }
  }
  flush();
  return bodies;
}

function cut(e: LiveEvent): LiveEvent {
  const out: LiveEvent = { ...e };
  for (const [k, v] of Object.entries(e)) {
    if (k === "type" || k === "at") continue;
    const text = typeof v === "string" ? v : JSON.stringify(v);
    if (text !== undefined && text.length > FIELD_MAX) out[k] = `${text.slice(0, FIELD_MAX)}… (cut: the stage's files keep it whole)`;
  }
  return Buffer.byteLength(JSON.stringify(out)) + 1 <= LIVE_BODY_MAX / 2 ? out : { type: e.type, at: e.at };
}

/** A relayed body's batches, none if it is not one or comes from `own` home (`b`: one batch, as hosts before packBatches sent). */
export function relayedBatches(body: string, own: string): LiveBatch[] {
  try {
    const parsed = JSON.parse(body) as { f?: unknown; b?: unknown; bs?: unknown };
    if (parsed.f === own) return [];
    const all = Array.isArray(parsed.bs) ? parsed.bs : [parsed.b];
    return all.filter(isBatch);
  } catch {
    return [];
  }
}

function isBatch(b: unknown): b is LiveBatch {
  const x = b as Partial<LiveBatch> | null;
  return typeof x === "object" && x !== null && x.live === 1 && typeof x.runId === "string" && typeof x.stage === "string" && typeof x.attempt === "number" && Array.isArray(x.events);
}

/** A watcher's side: asks for its runs while it watches them and hands relayed batches of them to `onBatch`. */
export class RemoteLiveWatcher {
  private channel: LiveChannel | undefined;
  private opening: Promise<void> | undefined;
  private runs = new Set<string>();
  private failures = 0;
  private closed = false;
  private readonly own: string;
  private readonly renew: ReturnType<typeof setInterval>;
  private retry: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly open: LiveChannelOpener,
    home: string,
    private readonly onBatch: (batch: LiveBatch) => void,
  ) {
    this.own = liveHomeKey(home);
    this.renew = setInterval(() => void this.ask(), WATCH_RENEW_MS);
    this.renew.unref?.();
  }

  /** Watches these runs from now (none: stops asking); resolves once asked, or when the channel cannot be had now. */
  async watch(runIds: readonly string[]): Promise<void> {
    this.runs = new Set(runIds);
    if (this.runs.size === 0 || this.closed) return;
    await this.connect();
    await this.ask();
  }

  private connect(): Promise<void> {
    if (this.channel || this.closed) return Promise.resolve();
    this.opening ??= this.open({
      onBody: (body) => {
        for (const b of relayedBatches(body, this.own)) if (this.runs.has(b.runId)) this.onBatch(b);
      },
      onLost: () => {
        this.channel = undefined;
        this.later();
      },
    }).then(
      (channel) => {
        this.opening = undefined;
        this.failures = 0;
        if (this.closed) void channel.close();
        else this.channel = channel;
      },
      () => {
        this.opening = undefined;
        this.later();
      },
    );
    return this.opening;
  }

  private later(): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      if (this.runs.size) void this.connect().then(() => this.ask());
    }, backoffDelay(REOPEN, this.failures++));
    this.retry.unref?.();
  }

  /** Asks now again (a relay marks its runs' streams on every ask: live.ts, LiveSubscriber.mark). */
  askAgain(): void {
    void this.ask();
  }

  private async ask(): Promise<void> {
    if (!this.channel || this.runs.size === 0) return;
    await this.channel.watch([...this.runs]).catch(() => {}); // a lost connection says so through onLost
  }

  close(): void {
    this.closed = true;
    clearInterval(this.renew);
    clearTimeout(this.retry);
    void this.channel?.close();
    this.channel = undefined;
  }
}

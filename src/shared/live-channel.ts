/**
 * The port through which live stage events cross machines
 * (docs/design/live-events.md, "Worker hosts"): a shared journal's
 * notification channel. A watcher asks for the runs it watches (`watch`);
 * a worker host hears the asks (`onWatch`) and relays the live events of
 * those runs (`publish`); watchers hear them (`onBody`). Nothing sent here
 * is stored: a body nobody listens to is gone, and each body is at most
 * LIVE_BODY_MAX bytes (a Postgres NOTIFY payload is below 8,000 bytes).
 *
 * Declared here, below both, so that the journal (which carries it) and the
 * broker's live events (which use it) need not know each other.
 */

/** Bytes of one body at most. */
export const LIVE_BODY_MAX = 7_000;

export interface LiveChannelHandlers {
  /** A relayed body (a watcher's side). */
  onBody?: (body: string) => void;
  /** Runs some watcher asked for (a relay's side). */
  onWatch?: (runIds: string[]) => void;
  /** The channel's connection is lost; open another to go on. */
  onLost?: (err: Error) => void;
}

export interface LiveChannel {
  /** Relays one body (at most LIVE_BODY_MAX bytes) to every watcher. */
  publish(body: string): Promise<void>;
  /** Asks every relay for the live events of these runs (asked again while wanted: relays forget an ask). */
  watch(runIds: string[]): Promise<void>;
  close(): Promise<void>;
}

export type LiveChannelOpener = (handlers: LiveChannelHandlers) => Promise<LiveChannel>;

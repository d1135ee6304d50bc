/**
 * The intercom client used by the CLI, the root, workers and the status
 * page: register (name, groups), send, ask, reply, list, status.
 *
 * States (one `setState` reports every move):
 *   idle ──start──▶ connecting ──hello answered──▶ open
 *   connecting ──failed──▶ backoff ──delay──▶ connecting
 *   open ──connection lost──▶ backoff (with `reconnect`) | closed
 *   any ──close()──▶ closed
 * Reconnects wait 1 s doubling up to 30 s, each ±20 % (shared/backoff.ts;
 * jitter, so clients that lost one broker do not all come back at once); on every
 * new connection the client registers its names again, the first one last. `nudge()` skips a
 * backoff wait (used when the broker's socket appears).
 *
 * Requests made while not open fail at once with intercom_unavailable:
 * callers decide whether to retry (everything durable lives in the
 * journal, so a lost notification is only a delay).
 */

import { AtomicError } from "../shared/errors.ts";
import { backoffDelay, type Backoff } from "../shared/backoff.ts";
import { connectBroker } from "./launch.ts";
import { unavailable, type Link, type Request } from "./link.ts";

const noReply = async (): Promise<void> => {};
import { GROUP_PREFIX, type IncomingMessage, type Mode, type Results, type SessionInfo, type BrokerInfo } from "./protocol/index.ts";

/** Reconnects (see the header): a broker comes back in about a second when someone starts it; 30 s between tries at most. */
export const RECONNECT_BACKOFF: Backoff = { firstMs: 1_000, maxMs: 30_000, jitter: 0.2 };

export const CLIENT_STATES = { idle: "idle", connecting: "connecting", open: "open", backoff: "backoff", closed: "closed" } as const;
export type ClientState = (typeof CLIENT_STATES)[keyof typeof CLIENT_STATES];

export interface ClientOptions {
  home: string;
  /** Who connects ("cli", "root", "status", ...), shown by `atomic sessions`. */
  role?: string;
  /** Start the broker when none answers (default true). A root only joins a broker someone else started. */
  spawn?: boolean;
  /** Keep reconnecting after a failure or a lost connection (default false: the client closes). */
  reconnect?: boolean;
  /** The reconnect schedule (default RECONNECT_BACKOFF). */
  backoff?: Backoff;
  /** A routed send or ask; call `reply` to answer an ask. */
  onMessage?(msg: IncomingMessage, reply: (body: unknown) => Promise<void>): void;
  onState?(change: { from: ClientState; to: ClientState }): void;
}

export class IntercomClient {
  state: ClientState = CLIENT_STATES.idle;
  private link: Link | undefined;
  private readonly names = new Map<string, { groups: string[]; role?: string }>();
  private attempts = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private waiters: { resolve: () => void; reject: (e: Error) => void }[] = [];
  private lastError: Error | undefined;

  constructor(readonly opts: ClientOptions) {}

  /** Connects now (spawning the broker unless `spawn: false`); throws intercom_unavailable if it cannot. */
  static async connect(opts: ClientOptions): Promise<IntercomClient> {
    const client = new IntercomClient(opts);
    client.start();
    await client.whenOpen();
    return client;
  }

  get isOpen(): boolean {
    return this.state === CLIENT_STATES.open;
  }

  /** idle → connecting. */
  start(): void {
    if (this.state !== CLIENT_STATES.idle) return;
    void this.connectOnce();
  }

  /** Resolves when open; rejects when the client closes (or, without `reconnect`, when connecting failed). */
  whenOpen(): Promise<void> {
    if (this.state === CLIENT_STATES.open) return Promise.resolve();
    if (this.state === CLIENT_STATES.closed) return Promise.reject(this.lastError ?? unavailable("the intercom client is closed"));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** In backoff: connect now instead of waiting out the delay. */
  nudge(): void {
    if (this.state !== CLIENT_STATES.backoff) return;
    clearTimeout(this.timer);
    void this.connectOnce();
  }

  /** `role`: what this session is, when not the connection's role (listed by `atomic sessions`). */
  async register(name: string, groups: string[] = [], role?: string): Promise<void> {
    const r = { groups, ...(role ? { role } : {}) };
    this.names.set(name, r);
    if (this.link?.open) await this.link.request("register", { type: "register", name, ...r });
  }

  async unregister(name: string): Promise<void> {
    if (!this.names.delete(name)) return;
    if (this.link?.open) await this.link.request("unregister", { type: "unregister", name });
  }

  /** Routes `body` to a session (or "group:<g>"); resolves with the sessions it was handed to. */
  send(to: string, body: unknown, opts?: { mode?: Mode; from?: string }): Promise<Results["send"]> {
    // The round-trip hot path: not async (no extra promise), no spreads, no temporary objects.
    const link = this.link;
    if (!link?.open) return Promise.reject(unavailable("not connected to the intercom broker"));
    const frame: Request<"send"> = { type: "send", to, body };
    if (opts?.mode) frame.mode = opts.mode;
    if (opts?.from) frame.from = opts.from;
    return link.request("send", frame);
  }

  /** Asks one session and waits for its reply (at most timeoutMs). */
  async ask(to: string, body: unknown, timeoutMs: number, opts: { from?: string } = {}): Promise<Results["ask"]> {
    return this.live().request("ask", { type: "ask", to, body, timeoutMs, ...(opts.from ? { from: opts.from } : {}) }, timeoutMs + 5_000);
  }

  async reply(inReplyTo: string, body: unknown): Promise<void> {
    await this.live().request("reply", { type: "reply", inReplyTo, body });
  }

  /** `wait`: answered once every one of `names` is registered, or after `ms` (the broker waits, not this process). */
  async list(group?: string, wait?: { names: string[]; ms: number }): Promise<SessionInfo[]> {
    const frame = { type: "list" as const, ...(group === undefined ? {} : { group }), ...(wait && wait.names.length > 0 ? { waitFor: wait.names, waitMs: Math.max(1, wait.ms) } : {}) };
    return (await this.live().request("list", frame, frame.waitMs === undefined ? undefined : frame.waitMs + 15_000)).sessions;
  }

  async status(): Promise<BrokerInfo> {
    return this.live().request("status", { type: "status" });
  }

  /** any → closed: drops the connection and stops reconnecting. */
  close(): void {
    clearTimeout(this.timer);
    const link = this.link;
    this.link = undefined;
    this.setState(CLIENT_STATES.closed);
    link?.close();
    this.settleWaiters(unavailable("the intercom client was closed"));
  }

  private live(): Link {
    if (!this.link?.open) throw unavailable("not connected to the intercom broker");
    return this.link;
  }

  private async connectOnce(): Promise<void> {
    if (this.state === CLIENT_STATES.closed) return;
    this.setState(CLIENT_STATES.connecting);
    let link!: Link;
    try {
      link = await connectBroker(this.opts.home, {
        spawn: this.opts.spawn ?? true,
        role: this.opts.role ?? "client",
        handlers: {
          // A reply goes out on the link its ask came in on: an ask can arrive while the names are still
          // being registered (before `this.link` is set), in the same read as the last register's reply.
          onMessage: (msg) => this.onMessage(msg, link),
          // connectBroker may open links that fail their hello (and close) before it returns one: their
          // onClose fires while `link` is still unassigned, and this.link is undefined too while connecting,
          // so onLost's `this.link !== link` check passed and a failed attempt counted as losing the
          // connection (a non-reconnecting client closed mid-connect and connect() rejected with "lost
          // the intercom connection"; a reconnecting one armed a second reconnect). Only the link we adopt counts.
          onClose: () => {
            if (link !== undefined) this.onLost(link);
          },
        },
      });
    } catch (err) {
      this.lastError = err instanceof Error ? err : new Error(String(err));
      this.afterFailure();
      return;
    }
    if ((this.state as ClientState) === CLIENT_STATES.closed) {
      link.close();
      return;
    }
    try {
      // The first name last (a run's root registers itself before its stages): whoever waits for it to be
      // listed (`atomic sessions` waits for each driven root) then finds the others too. Names registered
      // meanwhile are sent in the next round; one unregistered meanwhile is not sent.
      const sent = new Set<string>();
      for (;;) {
        const pending = [...this.names].filter(([name]) => !sent.has(name)).reverse();
        if (pending.length === 0) break;
        for (const [name, r] of pending) {
          sent.add(name);
          if (this.names.has(name)) await link.request("register", { type: "register", name, ...r });
        }
      }
    } catch (err) {
      this.lastError = err instanceof Error ? err : new Error(String(err));
      link.close();
      this.afterFailure();
      return;
    }
    if (!link.open) {
      this.afterFailure();
      return;
    }
    this.link = link;
    this.attempts = 0;
    this.setState(CLIENT_STATES.open);
    this.settleWaiters();
  }

  private onLost(link: Link): void {
    if (this.link !== link) return;
    this.link = undefined;
    if (this.state === CLIENT_STATES.closed) return;
    this.lastError = unavailable("lost the intercom connection");
    this.afterFailure();
  }

  private afterFailure(): void {
    if (this.state === CLIENT_STATES.closed) return;
    if (!this.opts.reconnect) {
      this.setState(CLIENT_STATES.closed);
      this.settleWaiters(this.lastError ?? unavailable("cannot reach the intercom broker"));
      return;
    }
    const delay = backoffDelay(this.opts.backoff ?? RECONNECT_BACKOFF, this.attempts++);
    this.setState(CLIENT_STATES.backoff);
    this.timer = setTimeout(() => void this.connectOnce(), delay);
  }

  private onMessage(msg: IncomingMessage, link: Link | undefined): void {
    const handler = this.opts.onMessage;
    if (!handler) return;
    handler(msg, msg.ask ? (body) => this.replyOn(link, msg.id, body) : noReply);
  }

  private async replyOn(link: Link | undefined, inReplyTo: string, body: unknown): Promise<void> {
    if (!link?.open) throw unavailable("not connected to the intercom broker");
    await link.request("reply", { type: "reply", inReplyTo, body });
  }

  private settleWaiters(err?: Error): void {
    const waiters = this.waiters.splice(0);
    for (const w of waiters) (err ? w.reject(err) : w.resolve());
  }

  private setState(to: ClientState): void {
    const from = this.state;
    if (from === to) return;
    this.state = to;
    this.opts.onState?.({ from, to });
  }
}

/** The group name of a root run's sessions. */
export function runGroup(rootId: string): string {
  return rootId;
}

export function groupAddress(group: string): string {
  return `${GROUP_PREFIX}${group}`;
}

export function isIntercomUnavailable(err: unknown): boolean {
  return err instanceof AtomicError && err.code === "intercom_unavailable";
}

/**
 * The intercom broker (`atomic --internal-intercom-broker --home DIR`): a
 * detached process that routes framed JSON between sessions over a unix
 * socket in `$ATOMIC_HOME/intercom/` (the protocol: protocol/v1.ts). It
 * keeps no durable state: messages to stages are queued in the journal by
 * their senders, so killing the broker loses nothing; the next client
 * starts a new one.
 *
 * Lifecycle:
 * - started behind the spawn lock (launch.ts); if a broker already answers
 *   on the socket it exits at once, so racing starters end with one;
 * - listens with a umask that makes the socket 0600 (directory 0700);
 *   writes its pid file; logs to stderr (the spawner points it at
 *   broker.log);
 * - exits after ATOMIC_INTERCOM_IDLE_MS (BROKER_IDLE_MS) with no connection, on SIGTERM/SIGINT, and when its
 *   socket file is gone or replaced (its home was removed, or another
 *   broker took the path over), removing its socket and pid file if they
 *   are still its own.
 *
 * Connections are state machines:
 *   greeting ──hello──▶ open ──bad frame / end──▶ closing ──▶ closed
 *   greeting ──anything else, or a bad frame──▶ closing
 * A malformed, oversized, unknown or wrong-version frame gets an `error`
 * frame and closes that connection only; every handler runs inside a
 * try/catch, so no input can take the broker down. A connection that stops
 * reading while frames pile up for it (over MAX_BACKLOG) is closed too.
 */

import type { Socket, TCPSocketListener, UnixSocketListener } from "bun";
import { chmodSync, existsSync, renameSync, statSync, unlinkSync, writeFileSync, readFileSync } from "node:fs";
import * as v from "valibot";
import { VERSION } from "../shared/version.ts";
import { FrameDecoder, FrameWriter } from "./framing.ts";
import { ensurePrivateDirs, intercomPaths, type IntercomPaths } from "./paths.ts";
import {
  CLIENT_FRAME_SCHEMAS,
  ClientFrameSchema,
  ERROR_CODES,
  PROTOCOL_VERSION,
  type BrokerFrame,
  type BrokerInfo,
  type ClientFrame,
  type Results,
} from "./protocol/index.ts";
import { Routes, type PendingAsk } from "./routing.ts";
import { probeBroker } from "./launch.ts";
import { writeStderr } from "../shared/raw-stderr.ts";
import { BROKER_IDLE_MS, readEnv } from "../shared/config/environment.ts";

/** Frames waiting for a connection that does not read: beyond this it is closed. */
const MAX_BACKLOG = 16 * 1024 * 1024;
const SUPERSEDE_CHECK_MS = 1_000;

export const CONN_STATES = { greeting: "greeting", open: "open", closing: "closing", closed: "closed" } as const;
export type ConnState = (typeof CONN_STATES)[keyof typeof CONN_STATES];

let nextConn = 0;

class Connection {
  readonly id = ++nextConn;
  state: ConnState = CONN_STATES.greeting;
  pid = 0;
  role = "";
  readonly decoder = new FrameDecoder();
  readonly writer: FrameWriter;

  constructor(
    readonly socket: Socket<Connection | undefined>,
    private readonly onState: (c: Connection, from: ConnState, to: ConnState) => void,
  ) {
    this.writer = new FrameWriter(socket);
  }

  /** greeting → open, after a valid hello. */
  greeted(pid: number, role: string): void {
    this.assertState(CONN_STATES.greeting);
    this.pid = pid;
    this.role = role;
    this.setState(CONN_STATES.open);
  }

  /** greeting | open → closing: stop reading frames, end once the last write went out. */
  closeAfterWrites(): void {
    if (this.state === CONN_STATES.closing || this.state === CONN_STATES.closed) return;
    this.setState(CONN_STATES.closing);
    this.writer.end();
  }

  /** any → closed (the socket is gone). */
  closed(): void {
    if (this.state !== CONN_STATES.closed) this.setState(CONN_STATES.closed);
  }

  get reading(): boolean {
    return this.state === CONN_STATES.greeting || this.state === CONN_STATES.open;
  }

  /** False when the frame cannot be sent (over the frame limit once wrapped); the caller tells the sender. */
  send(frame: BrokerFrame): boolean {
    if (this.state === CONN_STATES.closed) return true;
    if (!this.writer.writeJson(frame)) return false;
    if (this.writer.backlog > MAX_BACKLOG) {
      this.setState(CONN_STATES.closed);
      this.socket.terminate();
    }
    return true;
  }

  private assertState(expected: ConnState): void {
    if (this.state !== expected) throw new Error(`internal: connection ${this.id} is ${this.state}, not ${expected}`);
  }

  private setState(to: ConnState): void {
    const from = this.state;
    this.state = to;
    this.onState(this, from, to);
  }
}

export interface BrokerOptions {
  home: string;
  idleMs?: number;
  log?: (line: string) => void;
}

/** A `list` that waits for names to be registered (`waitFor`), until `timer` answers it anyway. */
interface ListWait {
  conn: Connection;
  id: string;
  group: string | undefined;
  waitFor: string[];
  timer: ReturnType<typeof setTimeout> | undefined;
}

export class Broker {
  readonly paths: IntercomPaths;
  readonly startedAt = Date.now();
  private listener: UnixSocketListener<Connection | undefined> | TCPSocketListener<Connection | undefined> | undefined;
  private readonly routes = new Routes<Connection>();
  private readonly connections = new Set<Connection>();
  private idleTimer: ReturnType<typeof setTimeout> | undefined;
  private supersedeTimer: ReturnType<typeof setInterval> | undefined;
  private socketIno = 0;
  private stopping = false;
  private readonly counters = { frames: 0, badFrames: 0, sent: 0, asks: 0 };
  /** `list` frames waiting for names to be registered (`waitFor`): answered when they all are, or at their `waitMs`. */
  private readonly listWaits = new Set<ListWait>();
  private readonly idleMs: number;
  private readonly log: (line: string) => void;
  private stopped!: () => void;
  /** Resolves once the broker stopped (idle, signal, superseded). */
  readonly done = new Promise<void>((resolve) => (this.stopped = resolve));

  constructor(opts: BrokerOptions) {
    this.paths = intercomPaths(opts.home);
    this.idleMs = opts.idleMs ?? BROKER_IDLE_MS;
    this.log = opts.log ?? ((line) => writeStderr(`${new Date().toISOString()} ${line}\n`));
  }

  /** Listens; returns false (and listens on nothing) when another broker already answers on the socket. */
  async start(): Promise<boolean> {
    ensurePrivateDirs(this.paths);
    if (await probeBroker(this.paths.socket)) {
      this.log(`another broker answers on ${this.paths.socket}; exiting`);
      return false;
    }
    try {
      unlinkSync(this.paths.socket);
    } catch {
      // no stale socket
    }
    const umask = process.umask(0o177);
    try {
      this.listener = Bun.listen<Connection | undefined>({
        unix: this.paths.socket,
        socket: {
          open: (socket) => this.onOpen(socket),
          data: (socket, chunk) => {
            try {
              this.onData(socket.data!, chunk);
            } catch (err) {
              this.crashed(socket.data, err);
            }
          },
          drain: (socket) => socket.data?.writer.drain(),
          close: (socket) => {
            try {
              this.onClose(socket.data!);
            } catch (err) {
              this.crashed(socket.data, err);
            }
          },
          error: (socket, err) => this.log(`connection ${socket.data?.id ?? "?"} error: ${err.message}`),
        },
      });
    } finally {
      process.umask(umask);
    }
    chmodSync(this.paths.socket, 0o600);
    this.socketIno = statSync(this.paths.socket).ino;
    const pidText = JSON.stringify({ pid: process.pid, socket: this.paths.socket, startedAt: this.startedAt, version: VERSION });
    const tmp = `${this.paths.pidFile}.${process.pid}`;
    writeFileSync(tmp, pidText, { mode: 0o600 });
    renameSync(tmp, this.paths.pidFile);
    this.supersedeTimer = setInterval(() => this.checkStillOurs(), SUPERSEDE_CHECK_MS);
    this.armIdle();
    this.log(`broker ${process.pid} listening on ${this.paths.socket} (protocol ${PROTOCOL_VERSION}, atomic ${VERSION})`);
    return true;
  }

  info(): BrokerInfo {
    return {
      pid: process.pid,
      version: VERSION,
      protocol: PROTOCOL_VERSION,
      startedAt: this.startedAt,
      uptimeMs: Date.now() - this.startedAt,
      connections: this.connections.size,
      sessions: this.routes.sessionCount,
      counters: { ...this.counters },
    };
  }

  stop(why: string): void {
    if (this.stopping) return;
    this.stopping = true;
    this.log(`stopping: ${why}`);
    clearTimeout(this.idleTimer);
    clearInterval(this.supersedeTimer);
    this.routes.clear();
    for (const c of this.connections) c.socket.terminate();
    this.listener?.stop(true);
    if (this.stillOurs()) {
      for (const f of [this.paths.socket]) {
        try {
          unlinkSync(f);
        } catch {
          // gone
        }
      }
    }
    try {
      if ((JSON.parse(readFileSync(this.paths.pidFile, "utf8")) as { pid?: number }).pid === process.pid) unlinkSync(this.paths.pidFile);
    } catch {
      // gone, or not ours
    }
    this.stopped();
  }

  // ---------------------------------------------------------------- connections

  private onOpen(socket: Socket<Connection | undefined>): void {
    const conn = new Connection(socket, (c, from, to) => {
      if (to === CONN_STATES.closed) this.forget(c);
      void from;
    });
    socket.data = conn;
    this.connections.add(conn);
    clearTimeout(this.idleTimer);
  }

  private onClose(conn: Connection): void {
    conn.closed();
  }

  /** A connection ended: free its names, end its asks, and start the idle clock if it was the last. */
  private forget(conn: Connection): void {
    if (!this.connections.delete(conn)) return;
    for (const w of this.listWaits) if (w.conn === conn) (clearTimeout(w.timer), this.listWaits.delete(w));
    for (const ask of this.routes.dropPeer(conn)) this.endAsk(ask, ERROR_CODES.sessionGone, `session ${ask.targetName} went away before replying`);
    if (this.connections.size === 0) this.armIdle();
  }

  private onData(conn: Connection, chunk: Uint8Array): void {
    if (!conn.reading) return;
    for (const d of conn.decoder.push(chunk)) {
      if (!conn.reading) return;
      if (!d.ok) {
        this.refuse(conn, null, d.code, d.message);
        return;
      }
      this.onFrame(conn, d.value);
    }
  }

  private onFrame(conn: Connection, value: unknown): void {
    this.counters.frames++;
    const type = typeof value === "object" && value !== null ? (value as { type?: unknown }).type : undefined;
    const schema = typeof type === "string" && Object.hasOwn(CLIENT_FRAME_SCHEMAS, type) ? CLIENT_FRAME_SCHEMAS[type]! : ClientFrameSchema;
    const parsed = v.safeParse(schema, value);
    if (!parsed.success) {
      const obj = (typeof value === "object" && value !== null ? value : {}) as { id?: unknown; v?: unknown; type?: unknown };
      const id = typeof obj.id === "string" && obj.id.length > 0 && obj.id.length <= 200 ? obj.id : null;
      if (typeof value === "object" && value !== null && !Array.isArray(value) && obj.v !== PROTOCOL_VERSION) {
        this.refuse(conn, id, ERROR_CODES.unsupportedVersion, `this broker speaks protocol ${PROTOCOL_VERSION}, not ${JSON.stringify(obj.v)}`);
      } else {
        const issue = parsed.issues[0];
        const where = issue.path?.map((p) => String(p.key)).join(".") ?? "";
        this.refuse(conn, id, ERROR_CODES.badFrame, `bad ${typeof obj.type === "string" ? JSON.stringify(obj.type).slice(0, 40) : ""} frame${where ? ` at ${where}` : ""}: ${issue.message}`);
      }
      return;
    }
    const f = parsed.output as ClientFrame;
    if (conn.state === CONN_STATES.greeting && f.type !== "hello") {
      this.refuse(conn, f.id, ERROR_CODES.notHello, "the first frame must be hello");
      return;
    }
    this.dispatch(conn, f);
  }

  private dispatch(conn: Connection, f: ClientFrame): void {
    switch (f.type) {
      case "hello":
        if (conn.state !== CONN_STATES.greeting) return this.fail(conn, f.id, ERROR_CODES.badFrame, "hello was already said");
        conn.greeted(f.pid, f.role);
        return this.ok(conn, f.id, { broker: { pid: process.pid, version: VERSION, protocol: PROTOCOL_VERSION } } satisfies Results["hello"]);
      case "register":
        if (this.routes.register(conn, f.name, f.groups, f.role) === "taken") {
          return this.fail(conn, f.id, ERROR_CODES.nameTaken, `the session name ${f.name} is taken by another connection`);
        }
        this.ok(conn, f.id, { name: f.name } satisfies Results["register"]);
        for (const w of this.listWaits) if (w.waitFor.every((n) => this.routes.resolve(n).length > 0)) this.answerList(w);
        return;
      case "unregister":
        if (this.routes.unregister(conn, f.name) === "not_yours") {
          return this.fail(conn, f.id, ERROR_CODES.notYours, `the session name ${f.name} belongs to another connection`);
        }
        return this.ok(conn, f.id, { name: f.name } satisfies Results["unregister"]);
      case "send": {
        const targets = this.routes.resolve(f.to);
        if (targets.length === 0) return this.fail(conn, f.id, ERROR_CODES.noSession, `no session ${f.to}`);
        const delivered: string[] = [];
        for (const t of targets) {
          const frame: BrokerFrame = { v: PROTOCOL_VERSION, type: "message", id: f.id, from: f.from ?? null, to: t.name, body: f.body, ask: false };
          if (f.mode) frame.mode = f.mode;
          if (!t.peer.send(frame)) return this.fail(conn, f.id, ERROR_CODES.frameTooLarge, "the message is too large to deliver");
          delivered.push(t.name);
        }
        this.counters.sent++;
        return this.ok(conn, f.id, { delivered } satisfies Results["send"]);
      }
      case "ask": {
        const targets = this.routes.resolve(f.to);
        if (targets.length !== 1) {
          return this.fail(conn, f.id, ERROR_CODES.noSession, targets.length === 0 ? `no session ${f.to}` : `${f.to} names ${targets.length} sessions; ask one`);
        }
        const target = targets[0]!;
        const ask = this.routes.addAsk(conn, f.id, target, f.timeoutMs, (a) => this.endAsk(a, ERROR_CODES.timeout, `${a.targetName} did not reply within ${f.timeoutMs} ms`));
        this.counters.asks++;
        if (!target.peer.send({ v: PROTOCOL_VERSION, type: "message", id: ask.routeId, from: f.from ?? null, to: target.name, body: f.body, ask: true })) {
          this.routes.takeAsk(ask.routeId);
          return this.fail(conn, f.id, ERROR_CODES.frameTooLarge, "the question is too large to deliver");
        }
        return;
      }
      case "reply": {
        const pending = this.routes.peekAsk(f.inReplyTo);
        if (!pending) return this.fail(conn, f.id, ERROR_CODES.unknownAsk, `no ask ${f.inReplyTo} waits for a reply (it timed out, or its asker left)`);
        if (pending.target !== conn) return this.fail(conn, f.id, ERROR_CODES.notYours, `ask ${f.inReplyTo} was not sent to this connection`);
        this.routes.takeAsk(f.inReplyTo);
        if (!pending.asker.send({ v: PROTOCOL_VERSION, type: "ok", id: pending.askerId, result: { from: pending.targetName, reply: f.body } satisfies Results["ask"] })) {
          this.fail(pending.asker, pending.askerId, ERROR_CODES.frameTooLarge, "the reply is too large to deliver");
        }
        return this.ok(conn, f.id, { delivered: true } satisfies Results["reply"]);
      }
      case "list": {
        const wait: ListWait = { conn, id: f.id, group: f.group, waitFor: f.waitFor ?? [], timer: undefined };
        if (f.waitMs === undefined || wait.waitFor.every((n) => this.routes.resolve(n).length > 0)) return this.answerList(wait);
        wait.timer = setTimeout(() => this.answerList(wait), f.waitMs);
        this.listWaits.add(wait);
        return;
      }
      case "status":
        return this.ok(conn, f.id, this.info() satisfies Results["status"]);
      default:
        return assertNever(f);
    }
  }

  private endAsk(ask: PendingAsk<Connection>, code: string, message: string): void {
    this.fail(ask.asker, ask.askerId, code, message);
  }

  private answerList(w: ListWait): void {
    clearTimeout(w.timer);
    this.listWaits.delete(w);
    this.ok(w.conn, w.id, { sessions: this.routes.list(w.group, (p) => ({ pid: p.pid, role: p.role })) } satisfies Results["list"]);
  }

  private ok(conn: Connection, id: string, result: unknown): void {
    conn.send({ v: PROTOCOL_VERSION, type: "ok", id, result });
  }

  private fail(conn: Connection, id: string | null, code: string, message: string): void {
    conn.send({ v: PROTOCOL_VERSION, type: "error", id, error: { name: "IntercomError", code, message } });
  }

  /** A frame this connection should not have sent: tell it why, then close it. */
  private refuse(conn: Connection, id: string | null, code: string, message: string): void {
    this.counters.badFrames++;
    this.fail(conn, id, code, message);
    conn.closeAfterWrites();
  }

  /** Whatever a socket handler throws closes that connection, never the broker. */
  private crashed(conn: Connection | undefined, err: unknown): void {
    this.log(`connection ${conn?.id ?? "?"}: ${(err as Error).stack ?? String(err)}`);
    if (conn) {
      conn.closed();
      conn.socket.terminate();
    }
  }

  // ---------------------------------------------------------------- lifetime

  private armIdle(): void {
    clearTimeout(this.idleTimer);
    if (this.stopping) return;
    this.idleTimer = setTimeout(() => {
      if (this.connections.size === 0) this.stop(`idle for ${this.idleMs} ms`);
    }, this.idleMs);
  }

  private stillOurs(): boolean {
    try {
      return statSync(this.paths.socket).ino === this.socketIno;
    } catch {
      return false;
    }
  }

  private checkStillOurs(): void {
    if (!this.stillOurs()) this.stop(existsSync(this.paths.socket) ? "another broker took the socket over" : "the socket file is gone");
  }
}

function assertNever(x: never): never {
  throw new Error(`internal: unhandled frame ${JSON.stringify(x)}`);
}

/** Entry of `--internal-intercom-broker`: its home in ATOMIC_HOME (launch.ts; `--home DIR` by hand). */
export async function brokerMain(argv: string[]): Promise<void> {
  const i = argv.indexOf("--home");
  const home = i >= 0 ? argv[i + 1] : readEnv("ATOMIC_HOME");
  if (!home) {
    writeStderr("error: the intercom broker needs ATOMIC_HOME (or --home DIR).\n");
    process.exit(2);
  }
  const broker = new Broker({ home, idleMs: readEnv("ATOMIC_INTERCOM_IDLE_MS") });
  // Last line of defence: a bug in a handler is logged, never fatal.
  process.on("uncaughtException", (err) => writeStderr(`${new Date().toISOString()} uncaught: ${err.stack ?? err.message}\n`));
  process.on("unhandledRejection", (err) => writeStderr(`${new Date().toISOString()} unhandled: ${String(err)}\n`));
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(sig, () => broker.stop(sig));
  let started: boolean;
  try {
    started = await broker.start();
  } catch (err) {
    writeStderr(`${new Date().toISOString()} cannot start: ${(err as Error).message}\n`);
    process.exit(1);
  }
  if (!started) process.exit(0);
  await broker.done;
  process.exit(0);
}

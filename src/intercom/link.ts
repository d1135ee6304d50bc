/**
 * One framed connection to a broker: connect, say hello, send requests and
 * match replies by id, hand unsolicited `message` frames to a callback. It
 * does not reconnect (client.ts does). A frame from the broker that does
 * not validate ends the link: a broker that speaks another protocol is not
 * one to keep talking to.
 */

import type { Socket } from "bun";
import * as v from "valibot";
import { AtomicError } from "../shared/errors.ts";
import { FrameDecoder, FrameWriter } from "./framing.ts";
import {
  MAX_FRAME_BYTES,
  BROKER_FRAME_SCHEMAS,
  BrokerFrameSchema,
  type BrokerFrame,
  PROTOCOL_VERSION,
  type ClientFrame,
  type ClientFrameType,
  type ErrorBody,
  type IncomingMessage,
  type Results,
} from "./protocol/index.ts";

/** An `error` reply of the broker, as a thrown error with its stable code. */
export class IntercomError extends AtomicError {
  override name = "IntercomError";
  constructor(code: string, message: string) {
    super(code, message, code === "intercom_unavailable" ? "retryable" : "usage");
  }
}

export function unavailable(message: string, cause?: unknown): AtomicError {
  return new AtomicError("intercom_unavailable", message, "retryable", {
    hint: "the intercom broker restarts on demand; try again",
    ...(cause === undefined ? {} : { cause }),
  });
}

/** A request as the caller writes it: the link adds `v` and `id`. */
export type Request<T extends ClientFrameType> = Omit<Extract<ClientFrame, { type: T }>, "v" | "id">;

interface Pending {
  resolve(result: unknown): void;
  reject(err: Error): void;
  deadline: number;
  type: string;
}

const SWEEP_MS = 250;

export interface LinkHandlers {
  onMessage?(msg: IncomingMessage): void;
  onClose?(why: string): void;
}

const DEFAULT_REQUEST_TIMEOUT_MS = 15_000;

export class Link {
  private readonly pending = new Map<string, Pending>();
  private readonly decoder = new FrameDecoder();
  private writer!: FrameWriter;
  private socket!: Socket<undefined>;
  private nextId = 0;
  private closedWhy: string | undefined;
  broker: Results["hello"]["broker"] | undefined;

  private constructor(private readonly handlers: LinkHandlers) {}

  /** Connects and says hello; rejects with intercom_unavailable when nothing answers at `socketPath`. */
  static async open(socketPath: string, role: string, handlers: LinkHandlers = {}, timeoutMs = 5_000): Promise<Link> {
    const link = new Link(handlers);
    try {
      link.socket = await Bun.connect<undefined>({
        unix: socketPath,
        socket: {
          data: (_s, chunk) => link.onData(chunk),
          drain: () => link.writer.drain(),
          close: () => link.onClosed("the broker closed the connection"),
          error: (_s, err) => link.onClosed(`connection error: ${err.message}`),
          connectError: () => {},
        },
      });
    } catch (err) {
      throw unavailable(`no intercom broker answers at ${socketPath} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, err);
    }
    link.writer = new FrameWriter(link.socket);
    try {
      const hello = await link.request("hello", { type: "hello", pid: process.pid, role }, timeoutMs);
      link.broker = hello.broker;
    } catch (err) {
      link.close();
      throw err instanceof AtomicError ? err : unavailable(`the intercom broker at ${socketPath} did not greet`, err);
    }
    return link;
  }

  get open(): boolean {
    return this.closedWhy === undefined;
  }

  /** Sends a request; resolves with its `ok` result, rejects with its `error` (or intercom_unavailable). */
  request<T extends ClientFrameType>(type: T, frame: Request<T>, timeoutMs = DEFAULT_REQUEST_TIMEOUT_MS): Promise<Results[T]> {
    if (this.closedWhy !== undefined) return Promise.reject(unavailable(`the intercom connection is closed (${this.closedWhy})`));
    const id = `r${++this.nextId}`;
    return new Promise<Results[T]>((resolve, reject) => {
      // Deadlines are checked by one sweep timer (not a timer per request: round trips are the hot path).
      this.pending.set(id, { resolve: resolve as (r: unknown) => void, reject, deadline: timeoutMs > 0 ? Date.now() + timeoutMs : Infinity, type });
      this.armSweep();
      const out = frame as Record<string, unknown>;
      out.v = PROTOCOL_VERSION;
      out.id = id;
      if (!this.writer.writeJson(out)) {
        this.pending.delete(id);
        reject(new IntercomError("frame_too_large", `the ${type} is over the frame limit of ${MAX_FRAME_BYTES} bytes`));
      }
    });
  }

  close(): void {
    this.onClosed("closed by this process");
    try {
      this.socket?.end();
    } catch {
      // already gone
    }
  }

  private onData(chunk: Uint8Array): void {
    for (const d of this.decoder.push(chunk)) {
      if (!d.ok) return this.fatal(`the broker sent a bad frame: ${d.message}`);
      const type = typeof d.value === "object" && d.value !== null ? (d.value as { type?: unknown }).type : undefined;
      const schema = typeof type === "string" && Object.hasOwn(BROKER_FRAME_SCHEMAS, type) ? BROKER_FRAME_SCHEMAS[type]! : BrokerFrameSchema;
      const parsed = v.safeParse(schema, d.value);
      if (!parsed.success) return this.fatal(`the broker sent a frame this client does not understand: ${parsed.issues[0].message}`);
      const f = parsed.output as BrokerFrame;
      switch (f.type) {
        case "ok":
        case "error": {
          if (f.id === null) {
            // The broker refused something it could not attribute: it closes the connection next.
            if (f.type === "error") this.closedWhy ??= `the broker refused a frame: ${f.error.message}`;
            break;
          }
          const p = this.pending.get(f.id);
          if (!p) break;
          this.pending.delete(f.id);
          if (f.type === "ok") p.resolve(f.result);
          else p.reject(errorFrom(f.error));
          break;
        }
        case "message":
          try {
            this.handlers.onMessage?.(f);
          } catch {
            // a handler's bug must not end the link
          }
          break;
        default:
          f satisfies never;
      }
    }
  }

  private fatal(why: string): void {
    this.onClosed(why);
    this.socket.terminate();
  }

  private onClosed(why: string): void {
    if (this.done) return;
    this.done = true;
    this.closedWhy ??= why;
    clearInterval(this.sweep);
    this.sweep = undefined;
    for (const [id, p] of this.pending) {
      p.reject(unavailable(`lost the intercom connection (${this.closedWhy})`));
      this.pending.delete(id);
    }
    this.handlers.onClose?.(this.closedWhy);
  }

  private sweep: ReturnType<typeof setInterval> | undefined;

  /** While requests are pending, a timer fails those past their deadline; it stops when none are left. */
  private armSweep(): void {
    if (this.sweep) return;
    this.sweep = setInterval(() => {
      const now = Date.now();
      for (const [id, p] of this.pending) {
        if (p.deadline > now) continue;
        this.pending.delete(id);
        p.reject(new IntercomError("timeout", `the intercom broker did not answer a ${p.type} in time`));
      }
      if (this.pending.size === 0) {
        clearInterval(this.sweep);
        this.sweep = undefined;
      }
    }, SWEEP_MS);
  }

  private done = false;
}

function errorFrom(e: ErrorBody): Error {
  return new IntercomError(e.code, e.message);
}

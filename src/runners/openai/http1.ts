/**
 * A small HTTP/1.1 client on this thread's event loop, for the agent loop's
 * calls to plain-HTTP endpoints: local model servers (Ollama, llama.cpp,
 * vLLM) on loopback or a LAN.
 *
 * Why not fetch there: Bun's fetch does every request on an HTTP thread of
 * its own, so each call is handed from this thread to that one and its
 * reply back, about 75 µs a call on these machines: a third of a call to a
 * local server that answers at once (bench/agents.ts). Here the request is
 * written from this thread and each TCP read goes to the consumer as it
 * arrives, synchronously (no promise per chunk).
 *
 * Scope (chat-client.ts keeps fetch for everything else: https:, and any
 * request while an HTTP proxy is configured):
 * - one request at a time on a connection; a connection is kept for the
 *   next request (of any stage of the process) when its reply ended
 *   cleanly and neither side said `Connection: close`. A kept connection
 *   the server closed while it was idle fails before any byte of the
 *   reply: the request is sent again, once, on a new connection;
 * - reply bodies framed by Content-Length, by the chunked transfer coding,
 *   or by the end of the connection; 1xx interim replies are skipped;
 *   no compression is asked for (`accept-encoding: identity`);
 * - an abort (the signal) drops the connection at once, whatever the
 *   request had reached.
 */

type Sock = Awaited<ReturnType<typeof Bun.connect<undefined>>>;

export interface HttpReply {
  readonly status: number;
  readonly headers: Headers;
  /**
   * Hands the body to `onChunk` as it arrives (what came with the head
   * first) and resolves at its end. An error thrown by `onChunk` rejects
   * it, as it is, and drops the connection.
   */
  pipe(onChunk: (bytes: Uint8Array) => void): Promise<void>;
  /** The whole body as text. */
  text(): Promise<string>;
  /** Drops the rest of the body (and the connection it was on). */
  cancel(): void;
}

/** A reply that did not arrive whole: the connection failed, closed early or sent something that is not HTTP/1.1. */
export class HttpError extends Error {
  constructor(
    message: string,
    readonly code: string,
  ) {
    super(message);
    this.name = "HttpError";
  }
}

const MAX_HEAD_BYTES = 64 * 1024;
const CRLFCRLF = Buffer.from("\r\n\r\n");

/**
 * Connections kept for the next request, by host and port, for the whole
 * process (a pool worker runs stage after stage against the same server,
 * and each would otherwise pay a connect). At most MAX_IDLE per origin;
 * they do not hold the process open, and one the server closes is dropped
 * when it closes.
 */
const idle = new Map<string, Connection[]>();
const MAX_IDLE = 4;

/** The requests of one caller to one origin (scheme http:). */
export class Http1Client {
  private readonly hostname: string;
  private readonly port: number;
  private readonly host: string;
  private readonly key: string;

  constructor(origin: URL) {
    if (origin.protocol !== "http:") throw new Error(`Http1Client speaks plain http only, not ${origin.protocol}`);
    this.hostname = origin.hostname.replace(/^\[(.*)\]$/, "$1");
    this.port = origin.port ? Number(origin.port) : 80;
    this.host = origin.host;
    this.key = `${this.hostname}:${this.port}`;
  }

  /**
   * POSTs `body` to `path`; resolves at the reply's head. On a kept
   * connection the request is written before this returns (a caller can
   * do its own work while the server answers).
   */
  async post(path: string, headers: Record<string, string>, body: string, signal?: AbortSignal): Promise<HttpReply> {
    let head = `POST ${path} HTTP/1.1\r\nhost: ${this.host}\r\ncontent-length: ${Buffer.byteLength(body)}\r\naccept-encoding: identity\r\n`;
    for (const [name, value] of Object.entries(headers)) {
      // as fetch does: a line break in a header would smuggle in another header or request
      if (/[\r\n\0]/.test(name + value)) throw new TypeError(`the header ${JSON.stringify(name)} holds a line break or a NUL`);
      head += `${name}: ${value}\r\n`;
    }
    const bytes = Buffer.from(`${head}\r\n${body}`);
    const kept = this.take();
    if (kept) {
      try {
        return await this.exchange(kept, bytes, signal);
      } catch (err) {
        // Closed by the server while it sat idle: nothing of the reply came, so the request was not answered.
        if (!(err instanceof HttpError && err.code === "idle_closed") || signal?.aborted) throw err;
      }
    }
    signal?.throwIfAborted();
    return this.exchange(await Connection.open(this.hostname, this.port, signal), bytes, signal);
  }

  private take(): Connection | undefined {
    const list = idle.get(this.key);
    while (list?.length) {
      const conn = list.pop()!;
      if (conn.usable) return conn;
    }
    return undefined;
  }

  private exchange(conn: Connection, bytes: Uint8Array, signal: AbortSignal | undefined): Promise<HttpReply> {
    return new Exchange(conn, signal, (reusable) => {
      const list = idle.get(this.key) ?? [];
      if (reusable && conn.usable && list.length < MAX_IDLE) {
        conn.park();
        list.push(conn);
        idle.set(this.key, list);
      } else conn.end();
    }).send(bytes);
  }
}

/** A TCP connection and whichever exchange is on it now. */
class Connection {
  private socket!: Sock;
  private closed = false;
  private outbox: Uint8Array | undefined;
  /** Exchanges made on it so far (a first exchange cannot meet a connection closed while idle). */
  uses = 0;
  current: Exchange | undefined;

  static async open(hostname: string, port: number, signal: AbortSignal | undefined): Promise<Connection> {
    const conn = new Connection();
    const connecting = Bun.connect<undefined>({
      hostname,
      port,
      socket: {
        data: (_s, chunk) => conn.current?.onData(chunk),
        drain: () => conn.flush(),
        close: () => conn.onClose(new HttpError("the server closed the connection", "closed")),
        error: (_s, err) => conn.onClose(err),
        connectError: () => {},
      },
    });
    let aborted: Promise<never> | undefined;
    if (signal) {
      aborted = new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true }));
      aborted.catch(() => {});
      // a connection that comes after the abort is not wanted
      void connecting.then((s) => signal.aborted && s.terminate(), () => {});
    }
    try {
      conn.socket = await (aborted ? Promise.race([connecting, aborted]) : connecting);
    } catch (err) {
      if (signal?.aborted) throw signal.reason;
      const e = err as { code?: string; message?: string };
      throw new HttpError(e.message ?? String(err), e.code ?? "connect_failed");
    }
    return conn;
  }

  /** Open, with no exchange on it and no request bytes still to send (a server may answer before it has read them all). */
  get usable(): boolean {
    return !this.closed && this.current === undefined && this.outbox === undefined;
  }

  write(bytes: Uint8Array): void {
    this.socket.ref();
    this.uses++;
    const n = this.socket.write(bytes);
    if (n < 0) this.onClose(new HttpError("the connection closed before the request was sent", this.uses > 1 ? "idle_closed" : "closed"));
    else if (n < bytes.length) this.outbox = bytes.subarray(n);
  }

  flush(): void {
    const rest = this.outbox;
    if (!rest) return;
    const n = this.socket.write(rest);
    this.outbox = n >= 0 && n < rest.length ? rest.subarray(n) : undefined;
  }

  /** Kept for the next request: it no longer holds the process open. */
  park(): void {
    this.socket.unref();
  }

  end(): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.end();
  }

  terminate(): void {
    if (this.closed) return;
    this.closed = true;
    this.socket.terminate();
  }

  private onClose(err: Error): void {
    this.closed = true;
    this.current?.onClosed(err);
  }
}

type Framing =
  | { kind: "length"; left: number }
  | { kind: "chunked"; state: "size" | "data" | "data_end" | "trailer"; left: number; line: string }
  | { kind: "close" }
  | { kind: "none" };

/** One request and its reply on a connection: writes it, parses the reply's head and body. */
class Exchange implements HttpReply {
  status = 0;
  headers = new Headers();
  private phase: "head" | "body" | "done" | "failed" = "head";
  private headBuf: Buffer | undefined;
  private framing: Framing = { kind: "none" };
  private keepAlive = false;
  /** Body bytes that came before `pipe` was called. */
  private pending: Uint8Array[] = [];
  private sink: ((bytes: Uint8Array) => void) | undefined;
  private error: unknown;
  private headWait!: { resolve(r: HttpReply): void; reject(e: unknown): void };
  private bodyWait: { resolve(): void; reject(e: unknown): void } | undefined;
  private readonly onAbort = () => this.fail(this.signal!.reason, false);

  constructor(
    private readonly conn: Connection,
    private readonly signal: AbortSignal | undefined,
    private readonly release: (reusable: boolean) => void,
  ) {}

  send(bytes: Uint8Array): Promise<HttpReply> {
    const head = new Promise<HttpReply>((resolve, reject) => (this.headWait = { resolve, reject }));
    this.signal?.addEventListener("abort", this.onAbort, { once: true });
    this.conn.current = this;
    this.conn.write(bytes);
    return head;
  }

  pipe(onChunk: (bytes: Uint8Array) => void): Promise<void> {
    if (this.phase === "failed") return Promise.reject(this.error);
    try {
      for (const bytes of this.pending) onChunk(bytes);
    } catch (err) {
      this.fail(err, true);
      return Promise.reject(err);
    }
    this.pending = [];
    // the consumer may have aborted while it read what had come
    const phase = this.phase as Exchange["phase"];
    if (phase === "failed") return Promise.reject(this.error);
    if (phase === "done") return Promise.resolve();
    this.sink = onChunk;
    return new Promise<void>((resolve, reject) => (this.bodyWait = { resolve, reject }));
  }

  async text(): Promise<string> {
    const parts: Uint8Array[] = [];
    await this.pipe((bytes) => parts.push(bytes.slice()));
    return Buffer.concat(parts).toString("utf8");
  }

  cancel(): void {
    if (this.phase === "done" || this.phase === "failed") return;
    this.phase = "failed";
    this.error = new HttpError("the reply was cancelled", "cancelled");
    this.detach();
    this.conn.terminate();
  }

  // ---------------------------------------------------------------- from the socket

  onData(chunk: Buffer): void {
    if (this.phase === "head") this.readHead(chunk);
    else if (this.phase === "body") this.readBody(chunk);
  }

  onClosed(err: Error): void {
    if (this.phase === "body" && this.framing.kind === "close") return this.finish(false);
    if (this.phase === "head" && this.headBuf === undefined && this.conn.uses > 1) {
      return this.fail(new HttpError("the kept connection was closed by the server", "idle_closed"), false);
    }
    const what = this.phase === "head" ? "before the reply's head" : "before the reply's end";
    this.fail(err instanceof HttpError ? new HttpError(`${err.message} ${what}`, err.code) : err, false);
  }

  // ---------------------------------------------------------------- parsing

  private readHead(chunk: Buffer): void {
    let buf = this.headBuf ? Buffer.concat([this.headBuf, chunk]) : chunk;
    for (;;) {
      const end = buf.indexOf(CRLFCRLF);
      if (end < 0) {
        if (buf.length > MAX_HEAD_BYTES) return this.fail(new HttpError("the reply's head is over 64 KiB", "bad_reply"), true);
        this.headBuf = buf;
        return;
      }
      if (!this.parseHead(buf.toString("latin1", 0, end))) return;
      buf = buf.subarray(end + 4);
      if (this.status >= 200 || this.status === 101) break;
      // an interim 1xx reply: the real one follows
      this.headers = new Headers();
      if (buf.length === 0) {
        this.headBuf = undefined;
        return;
      }
    }
    this.headBuf = undefined;
    this.phase = "body";
    this.headWait.resolve(this);
    if (this.framing.kind === "none" || (this.framing.kind === "length" && this.framing.left === 0)) this.finish(buf.length === 0);
    else if (buf.length > 0) this.readBody(buf);
  }

  /** False when the head is not HTTP/1.x (and the exchange has failed). */
  private parseHead(text: string): boolean {
    const lines = text.split("\r\n");
    const m = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(lines[0]!);
    if (!m) {
      this.fail(new HttpError(`the server's reply is not HTTP/1.1 (${JSON.stringify(lines[0]!.slice(0, 40))})`, "bad_reply"), true);
      return false;
    }
    this.status = Number(m[2]);
    for (let i = 1; i < lines.length; i++) {
      const colon = lines[i]!.indexOf(":");
      if (colon <= 0) continue;
      try {
        this.headers.append(lines[i]!.slice(0, colon).trim(), lines[i]!.slice(colon + 1).trim());
      } catch {
        // a header Headers refuses (odd bytes): not one we read
      }
    }
    const connection = this.headers.get("connection")?.toLowerCase() ?? "";
    this.keepAlive = m[1] === "1" ? !connection.includes("close") : connection.includes("keep-alive");
    const length = this.headers.get("content-length");
    if (this.status < 200 || this.status === 204 || this.status === 304) this.framing = { kind: "none" };
    else if (/chunked/i.test(this.headers.get("transfer-encoding") ?? "")) this.framing = { kind: "chunked", state: "size", left: 0, line: "" };
    else if (length !== null && /^\d+$/.test(length.trim())) this.framing = { kind: "length", left: Number(length.trim()) };
    else {
      this.framing = { kind: "close" };
      this.keepAlive = false;
    }
    return true;
  }

  private readBody(bytes: Uint8Array): void {
    const f = this.framing;
    if (f.kind === "close") return this.emit(bytes);
    if (f.kind === "length") {
      const n = Math.min(f.left, bytes.length);
      if (n > 0) this.emit(n === bytes.length ? bytes : bytes.subarray(0, n));
      f.left -= n;
      if (this.phase === "body" && f.left === 0) this.finish(n === bytes.length);
      return;
    }
    if (f.kind !== "chunked") return;
    let i = 0;
    while (i < bytes.length && this.phase === "body") {
      if (f.state === "data") {
        const n = Math.min(f.left, bytes.length - i);
        this.emit(bytes.subarray(i, i + n));
        i += n;
        f.left -= n;
        if (f.left === 0) f.state = "data_end";
        continue;
      }
      // size, data_end and trailer are lines: read up to the LF
      const nl = bytes.indexOf(10, i);
      const part = Buffer.from(bytes.buffer, bytes.byteOffset + i, (nl < 0 ? bytes.length : nl) - i).toString("latin1");
      if (nl < 0) {
        f.line += part;
        if (f.line.length > 4096) return this.fail(new HttpError("a chunk line of the reply is over 4 KiB", "bad_reply"), true);
        return;
      }
      const line = (f.line + part).replace(/\r$/, "");
      f.line = "";
      i = nl + 1;
      if (f.state === "data_end") {
        if (line !== "") return this.fail(new HttpError("a chunk of the reply did not end where its size said", "bad_reply"), true);
        f.state = "size";
      } else if (f.state === "size") {
        const size = /^([0-9a-fA-F]+)[ \t]*(?:;.*)?$/.exec(line);
        if (!size) return this.fail(new HttpError(`the reply's chunk size is not hexadecimal (${JSON.stringify(line.slice(0, 20))})`, "bad_reply"), true);
        f.left = parseInt(size[1]!, 16);
        f.state = f.left === 0 ? "trailer" : "data";
      } else if (line === "") {
        return this.finish(i === bytes.length);
      }
      // else a trailer field: nothing we read
    }
  }

  private emit(bytes: Uint8Array): void {
    if (!this.sink) {
      this.pending.push(bytes.slice());
      return;
    }
    try {
      this.sink(bytes);
    } catch (err) {
      this.fail(err, true);
    }
  }

  // ---------------------------------------------------------------- endings

  /** The reply is whole; `clean`: nothing came after it (the connection can serve the next request). */
  private finish(clean: boolean): void {
    if (this.phase === "done" || this.phase === "failed") return;
    this.phase = "done";
    this.detach();
    this.release(clean && this.keepAlive);
    this.bodyWait?.resolve();
  }

  /** `dropConnection`: the connection is still open and must not be reused (a parse error, a consumer's error). */
  private fail(err: unknown, dropConnection: boolean): void {
    if (this.phase === "done" || this.phase === "failed") return;
    const wasHead = this.phase === "head";
    this.phase = "failed";
    this.error = err;
    this.detach();
    if (dropConnection || this.signal?.aborted) this.conn.terminate();
    else this.conn.end();
    if (wasHead) this.headWait.reject(err);
    else this.bodyWait?.reject(err);
  }

  private detach(): void {
    this.signal?.removeEventListener("abort", this.onAbort);
    if (this.conn.current === this) this.conn.current = undefined;
    this.sink = undefined;
  }
}

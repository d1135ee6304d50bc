/**
 * A small HTTP/1.1 client on this thread's event loop, for the agent loop's
 * calls to plain-HTTP endpoints: local model servers (Ollama, llama.cpp,
 * vLLM) on loopback or a LAN.
 *
 * Why not fetch there: Bun's fetch does every request on an HTTP thread of
 * its own, so each call is handed from this thread to that one and its
 * reply back. Against a local server answering a 3 KB streamed request at
 * once, measured here: fetch 145-165 µs a call (70 µs of CPU), this client
 * 115-125 µs (45 µs of CPU); the agent loop's 20 turns went from 9.5 to
 * 4-5 ms (bench/agents.ts). Here the request is written from this thread
 * and each TCP read goes to the consumer as it arrives, synchronously (no
 * promise per chunk).
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

/** A reply's header fields by name (any case); the values of a repeated field joined by ", ". */
export interface ReplyHeaders {
  get(name: string): string | null;
}

export interface HttpReply {
  readonly status: number;
  readonly headers: ReplyHeaders;
  /**
   * Hands the body to `onChunk` as it arrives (what came with the head
   * first) and resolves at its end. An error thrown by `onChunk` rejects
   * it, as it is, and drops the connection.
   */
  pipe(onChunk: (bytes: Uint8Array) => void): Promise<void>;
  /** The whole body as text. */
  text(): Promise<string>;
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

/** A request as written: its text, and its length in bytes (UTF-8). */
interface Request {
  text: string;
  bytes: number;
}

const MAX_HEAD_BYTES = 64 * 1024;
const MAX_TRAILER_BYTES = 4096;
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
  post(path: string, headers: Record<string, string>, body: string, signal?: AbortSignal): Promise<HttpReply> {
    const bodyBytes = Buffer.byteLength(body);
    let head = `POST ${path} HTTP/1.1\r\nhost: ${this.host}\r\ncontent-length: ${bodyBytes}\r\naccept-encoding: identity\r\n`;
    for (const name in headers) {
      const value = headers[name]!;
      // as fetch does: a line break in a header would smuggle in another header or request
      if (/[\r\n\0]/.test(name) || /[\r\n\0]/.test(value)) return Promise.reject(new TypeError(`the header ${JSON.stringify(name)} holds a line break or a NUL`));
      head += `${name}: ${value}\r\n`;
    }
    const request: Request = { text: `${head}\r\n${body}`, bytes: Buffer.byteLength(head) + 2 + bodyBytes };
    const kept = this.take();
    if (!kept) return this.onNewConnection(request, signal);
    return this.exchange(kept, request, signal).catch((err: unknown) => {
      // Closed by the server while it sat idle: nothing of the reply came, so the request was not answered.
      if (!(err instanceof HttpError && err.code === "idle_closed") || signal?.aborted) throw err;
      return this.onNewConnection(request, signal);
    });
  }

  private async onNewConnection(request: Request, signal: AbortSignal | undefined): Promise<HttpReply> {
    signal?.throwIfAborted();
    return this.exchange(await Connection.open(this.hostname, this.port, signal), request, signal);
  }

  private take(): Connection | undefined {
    const list = idle.get(this.key);
    while (list?.length) {
      const conn = list.pop()!;
      if (conn.usable) return conn;
    }
    return undefined;
  }

  private exchange(conn: Connection, request: Request, signal: AbortSignal | undefined): Promise<HttpReply> {
    return new Exchange(conn, signal, (reusable) => {
      const list = idle.get(this.key) ?? [];
      if (reusable && conn.usable && list.length < MAX_IDLE) {
        conn.park();
        list.push(conn);
        idle.set(this.key, list);
      } else conn.end();
    }).send(request);
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

  /** Writes the request: what the socket does not take at once goes out as it drains. */
  write(request: Request): void {
    this.socket.ref();
    this.uses++;
    const n = this.socket.write(request.text);
    if (n < 0) return this.onClose(new HttpError("the connection closed before the request was sent", this.uses > 1 ? "idle_closed" : "closed"));
    // Most requests go out whole; only a partial write pays for the rest as bytes.
    if (n < request.bytes) this.outbox = Buffer.from(request.text).subarray(n);
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
  | {
      kind: "chunked";
      state: "size" | "data" | "data_end" | "trailer";
      /** Bytes left of the chunk being read (while "size": the size read so far). */
      left: number;
      /** Hex digits of the size line so far, and whether its extension (after ";") has begun. */
      digits: number;
      ext: boolean;
      /** Bytes of the trailer line being read, and of the whole trailer. */
      line: number;
      trailer: number;
    }
  | { kind: "close" }
  | { kind: "none" };

/** A reply head's fields, found in its text when asked for (a reply's framing needs three; most replies nothing else). */
class HeadFields implements ReplyHeaders {
  private fields: Map<string, string> | undefined;

  constructor(private readonly head: string) {}

  get(name: string): string | null {
    if (!this.fields) {
      this.fields = new Map();
      const lines = this.head.split("\r\n");
      for (let i = 1; i < lines.length; i++) {
        const colon = lines[i]!.indexOf(":");
        if (colon <= 0) continue;
        const key = lines[i]!.slice(0, colon).trim().toLowerCase();
        const value = lines[i]!.slice(colon + 1).trim();
        const had = this.fields.get(key);
        this.fields.set(key, had === undefined ? value : `${had}, ${value}`);
      }
    }
    return this.fields.get(name.toLowerCase()) ?? null;
  }
}

/** One request and its reply on a connection: writes it, parses the reply's head and body. */
class Exchange implements HttpReply {
  status = 0;
  headers: ReplyHeaders = new HeadFields("");
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

  send(request: Request): Promise<HttpReply> {
    const head = new Promise<HttpReply>((resolve, reject) => (this.headWait = { resolve, reject }));
    this.signal?.addEventListener("abort", this.onAbort, { once: true });
    this.conn.current = this;
    this.conn.write(request);
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
    const m = /^HTTP\/1\.([01]) (\d{3})(?: |\r|$)/.exec(text);
    if (!m) {
      this.fail(new HttpError(`the server's reply is not HTTP/1.1 (${JSON.stringify(text.split("\r\n", 1)[0]!.slice(0, 40))})`, "bad_reply"), true);
      return false;
    }
    this.status = Number(m[2]);
    this.headers = new HeadFields(text);
    // The framing fields, read straight from the text (a field repeated: its first value).
    const connection = /\r\nconnection:[ \t]*([^\r]*)/i.exec(text)?.[1]?.toLowerCase() ?? "";
    const length = /\r\ncontent-length:[ \t]*([^\r]*)/i.exec(text)?.[1]?.trim();
    const chunked = /\r\ntransfer-encoding:[^\r]*chunked/i.test(text);
    this.keepAlive = m[1] === "1" ? !connection.includes("close") : connection.includes("keep-alive");
    if (this.status < 200 || this.status === 204 || this.status === 304) this.framing = { kind: "none" };
    else if (chunked) this.framing = { kind: "chunked", state: "size", left: 0, digits: 0, ext: false, line: 0, trailer: 0 };
    else if (length !== undefined && /^\d+$/.test(length)) this.framing = { kind: "length", left: Number(length) };
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
    // Chunk lines are read byte by byte, wherever the packets split them: a size line
    // (hex digits, an optional ";extension"), the chunk's data, its CRLF, ..., a 0 size, trailer lines, an empty line.
    let i = 0;
    const n = bytes.length;
    while (i < n && this.phase === "body") {
      if (f.state === "data") {
        const take = Math.min(f.left, n - i);
        this.emit(take === n && i === 0 ? bytes : bytes.subarray(i, i + take));
        i += take;
        f.left -= take;
        if (f.left === 0) f.state = "data_end";
        continue;
      }
      const c = bytes[i++]!;
      if (f.state === "size") {
        if (c === 10) {
          if (f.digits === 0) return this.fail(new HttpError("a chunk size line of the reply has no size", "bad_reply"), true);
          f.state = f.left === 0 ? "trailer" : "data";
          f.digits = 0;
          f.ext = false;
        } else if (f.ext || c === 13) {
          // the extension, up to the end of the line; or the CR before the LF
        } else if (c === 59 || c === 32 || c === 9) {
          f.ext = true;
        } else {
          const digit = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
          if (digit < 0 || ++f.digits > 12) return this.fail(new HttpError(`the reply's chunk size is not hexadecimal (byte ${c})`, "bad_reply"), true);
          f.left = f.left * 16 + digit;
        }
      } else if (f.state === "data_end") {
        if (c === 10) f.state = "size";
        else if (c !== 13) return this.fail(new HttpError("a chunk of the reply did not end where its size said", "bad_reply"), true);
      } else if (c === 10) {
        // the trailer: fields we do not read, up to an empty line
        if (f.line === 0) return this.finish(i === n);
        f.line = 0;
      } else if (c !== 13) {
        f.line++;
        if (++f.trailer > MAX_TRAILER_BYTES) return this.fail(new HttpError("the reply's trailer is over 4 KiB", "bad_reply"), true);
      }
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

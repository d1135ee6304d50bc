/**
 * The agent loop's own HTTP/1.1 client (src/runners/openai/http1.ts)
 * against a scripted TCP server on 127.0.0.1 that writes exactly the bytes
 * each test gives it (split wherever the test splits them), and against
 * Bun.serve: framing by length, chunks and close; heads and chunk lines
 * split across packets; interim replies; connection reuse and what ends
 * it; a kept connection closed by the server; aborts; a refused connect;
 * a request body larger than the socket takes at once; replies that are
 * not HTTP.
 */

import type { Socket } from "bun";
import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { HttpError, Http1Client } from "../../src/runners/openai/http1.ts";
import { waitUntil } from "../engine/helpers.ts";

type ServerSocket = Socket<ConnState>;

interface ConnState {
  id: number;
  received: string;
}

interface Request {
  conn: number;
  head: string;
  body: string;
  socket: ServerSocket;
}

/**
 * A TCP server that parses requests (head and Content-Length body) and
 * hands each to `respond`, which writes whatever it likes.
 */
function scriptedServer(respond: (req: Request) => void | Promise<void>) {
  let conns = 0;
  const requests: Request[] = [];
  const closed: number[] = [];
  const listener = Bun.listen<ConnState>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        s.data = { id: ++conns, received: "" };
      },
      data(s, chunk) {
        s.data.received += chunk.toString("latin1");
        for (;;) {
          const end = s.data.received.indexOf("\r\n\r\n");
          if (end < 0) return;
          const head = s.data.received.slice(0, end);
          const length = Number(/content-length: (\d+)/i.exec(head)?.[1] ?? 0);
          if (s.data.received.length < end + 4 + length) return;
          const body = s.data.received.slice(end + 4, end + 4 + length);
          s.data.received = s.data.received.slice(end + 4 + length);
          const req = { conn: s.data.id, head, body, socket: s };
          requests.push(req);
          void respond(req);
        }
      },
      close(s) {
        closed.push(s.data.id);
      },
    },
  });
  return {
    origin: new URL(`http://127.0.0.1:${listener.port}`),
    requests,
    closed,
    get connections() {
      return conns;
    },
    stop: () => listener.stop(true),
  };
}

const stops: (() => void)[] = [];
afterEach(() => {
  for (const stop of stops.splice(0)) stop();
});

function serve(respond: (req: Request) => void | Promise<void>) {
  const server = scriptedServer(respond);
  stops.push(server.stop);
  return server;
}

const ok = (body: string, extra = "") => `HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

async function writeInPieces(socket: ServerSocket, text: string, size: number): Promise<void> {
  for (let i = 0; i < text.length; i += size) {
    socket.write(text.slice(i, i + size));
    socket.flush();
    await Bun.sleep(1);
  }
}

async function post(client: Http1Client, body = "{}", signal?: AbortSignal) {
  const reply = await client.post("/v1/chat/completions", { "content-type": "application/json" }, body, signal);
  return { status: reply.status, headers: reply.headers, text: await reply.text() };
}

test("a Content-Length reply; the next request goes on the same connection", async () => {
  const server = serve((req) => void req.socket.write(ok(`you sent ${req.body}`, "x-extra: 1\r\n")));
  const client = new Http1Client(server.origin);
  const first = await post(client, '{"n":1}');
  expect(first).toMatchObject({ status: 200, text: 'you sent {"n":1}' });
  expect(first.headers.get("x-extra")).toBe("1");
  expect((await post(client, '{"n":2}')).text).toBe('you sent {"n":2}');
  expect(server.connections).toBe(1);
  const head = server.requests[0]!.head;
  expect(head).toStartWith("POST /v1/chat/completions HTTP/1.1\r\n");
  expect(head).toContain(`host: ${server.origin.host}`);
  expect(head).toContain("content-length: 7");
  expect(head).toContain("content-type: application/json");
});

test("chunked replies split anywhere (inside the head, chunk sizes, data and CRLFs), with extensions and trailers", async () => {
  const body = "4;ext=1\r\nWiki\r\n6\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nx-trailer: yes\r\n\r\n";
  const reply = `HTTP/1.1 200 OK\r\nX-Seen: a\r\nTransfer-Encoding: Chunked\r\nx-seen: b\r\n\r\n${body}`;
  for (const size of [1, 3, 7, reply.length]) {
    const server = serve((req) => writeInPieces(req.socket, reply, size));
    const client = new Http1Client(server.origin);
    const first = await post(client);
    expect(first.text).toBe("Wikipedia in \r\n\r\nchunks.");
    expect(first.headers.get("x-seen")).toBe("a, b");
    // the reply ended cleanly: the connection serves the next request
    expect((await post(client)).text).toBe("Wikipedia in \r\n\r\nchunks.");
    expect(server.connections).toBe(1);
  }
});

test("an interim 100 Continue is skipped; a body that ends with the connection is read to its end and the connection not kept", async () => {
  const server = serve((req) => {
    req.socket.write("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end");
    req.socket.end();
  });
  const client = new Http1Client(server.origin);
  expect(await post(client)).toMatchObject({ status: 200, text: "until the end" });
  expect(await post(client)).toMatchObject({ status: 200, text: "until the end" });
  expect(server.connections).toBe(2);
});

test("Connection: close from the server, or a 1.0 reply, is not kept", async () => {
  const server = serve((req) => void req.socket.write(req.conn === 1 ? ok("one", "connection: close\r\n") : `HTTP/1.0 200 OK\r\ncontent-length: 3\r\n\r\ntwo`));
  const client = new Http1Client(server.origin);
  expect((await post(client)).text).toBe("one");
  expect((await post(client)).text).toBe("two");
  expect((await post(client)).text).toBe("two");
  expect(server.connections).toBe(3);
});

test("statuses without a body (204) and error statuses come through with their headers", async () => {
  const server = serve((req) => void req.socket.write(req.body === "a" ? "HTTP/1.1 204 No Content\r\n\r\n" : `HTTP/1.1 429 Too Many Requests\r\nretry-after: 2\r\ncontent-length: 9\r\n\r\nslow down`));
  const client = new Http1Client(server.origin);
  expect(await post(client, "a")).toMatchObject({ status: 204, text: "" });
  const limited = await post(client, "b");
  expect(limited).toMatchObject({ status: 429, text: "slow down" });
  expect(limited.headers.get("retry-after")).toBe("2");
  expect(server.connections).toBe(1);
});

test("a kept connection the server closed while idle: the request is sent again on a new one, and answered once", async () => {
  const server = serve((req) => {
    req.socket.write(ok(`answer ${req.conn}`));
    // the server's idle timeout: it closes the connection after its first reply
    setTimeout(() => req.socket.end(), 5);
  });
  const client = new Http1Client(server.origin);
  expect((await post(client)).text).toBe("answer 1");
  await waitUntil(() => server.closed.includes(1), "the server closes the first connection", 5_000);
  expect((await post(client)).text).toBe("answer 2");
  expect(server.requests.map((r) => r.conn)).toEqual([1, 2]);
});

test("a connection closed in the middle of a reply fails it: before the head, and in the body", async () => {
  const server = serve((req) => {
    req.socket.write(req.body === "head" ? "HTTP/1.1 200 OK\r\ncontent-le" : ok("0123456789").slice(0, -4));
    req.socket.end();
  });
  const client = new Http1Client(server.origin);
  const early = await client.post("/", {}, "head").catch((e: unknown) => e);
  expect(early).toBeInstanceOf(HttpError);
  expect((early as HttpError).message).toContain("before the reply's head");
  const reply = await client.post("/", {}, "body");
  const late = await reply.text().catch((e: unknown) => e);
  expect(late).toBeInstanceOf(HttpError);
  expect((late as HttpError).message).toContain("before the reply's end");
});

test("what is not HTTP/1.1 fails clearly: a reply that is not HTTP, a chunk size that is not hexadecimal, a chunk longer than its size", async () => {
  const replies: Record<string, string> = {
    garbage: "SSH-2.0-OpenSSH_9.2\r\n\r\n",
    size: "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    long: "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n",
  };
  const server = serve((req) => void req.socket.write(replies[req.body]!));
  const client = new Http1Client(server.origin);
  const garbage = await client.post("/", {}, "garbage").catch((e: unknown) => e);
  expect(garbage).toMatchObject({ code: "bad_reply" });
  expect((garbage as Error).message).toContain("not HTTP/1.1");
  for (const [body, words] of [["size", "not hexadecimal"], ["long", "did not end where its size said"]] as const) {
    const err = await (await client.post("/", {}, body)).text().catch((e: unknown) => e);
    expect(err).toMatchObject({ code: "bad_reply" });
    expect((err as Error).message).toContain(words);
  }
});

test("an abort while waiting for the head, and in the middle of the body, rejects with its reason and drops the connection", async () => {
  const server = serve((req) => {
    if (req.body === "body") req.socket.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n");
    // otherwise: never answers
  });
  const client = new Http1Client(server.origin);
  const waiting = new AbortController();
  const pending = client.post("/", {}, "head", waiting.signal);
  await waitUntil(() => server.requests.length === 1, "the request arrives", 5_000);
  waiting.abort("interrupt");
  expect(await pending.catch((e: unknown) => e)).toBe("interrupt");
  await waitUntil(() => server.closed.includes(1), "the connection is dropped", 5_000);

  const reading = new AbortController();
  const reply = await client.post("/", {}, "body", reading.signal);
  const seen: string[] = [];
  const piped = reply.pipe((bytes) => {
    seen.push(Buffer.from(bytes).toString());
    reading.abort("stop");
  });
  expect(await piped.catch((e: unknown) => e)).toBe("stop");
  expect(seen).toEqual(["first"]);
  await waitUntil(() => server.closed.includes(2), "the second connection is dropped", 5_000);
  // an already aborted signal sends nothing
  const before = server.requests.length;
  expect(await client.post("/", {}, "x", AbortSignal.abort("early")).catch((e: unknown) => e)).toBe("early");
  expect(server.requests.length).toBe(before);
});

test("an error thrown by the consumer of the body rejects the pipe with it; a connection left mid-reply is dropped", async () => {
  const server = serve((req) => void req.socket.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n"));
  const client = new Http1Client(server.origin);
  const reply = await client.post("/", {}, "x");
  const thrown = new Error("the consumer gave up");
  const piped = reply.pipe(() => {
    throw thrown;
  });
  expect(await piped.catch((e: unknown) => e)).toBe(thrown);
  await waitUntil(() => server.closed.includes(1), "the connection is dropped", 5_000);
});

test("nothing listening: the connect fails with its code", async () => {
  const server = serve(() => {});
  const origin = server.origin;
  server.stop();
  const err = await new Http1Client(origin).post("/", {}, "x").catch((e: unknown) => e);
  expect(err).toBeInstanceOf(HttpError);
  expect((err as HttpError).code).toBe("ECONNREFUSED");
});

test("request bodies arrive byte for byte: multi-byte characters, and more than the socket takes at once (written as it drains)", async () => {
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch: async (req) => {
      const bytes = new Uint8Array(await req.arrayBuffer());
      return new Response(`${req.headers.get("content-length")} ${bytes.length} ${new Bun.CryptoHasher("sha256").update(bytes).digest("hex")}`);
    },
  });
  stops.push(() => void server.stop(true));
  const client = new Http1Client(new URL(`http://127.0.0.1:${server.port}`));
  for (const body of ["héllo ✓ 𝄞", "x".repeat(8 * 1024 * 1024), "é✓".repeat(2 * 1024 * 1024)]) {
    const bytes = Buffer.from(body);
    const digest = new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
    expect(await (await client.post("/", {}, body)).text()).toBe(`${bytes.length} ${bytes.length} ${digest}`);
  }
});

test("a header holding a line break is refused before anything is sent", async () => {
  const server = serve((req) => void req.socket.write(ok("no")));
  const client = new Http1Client(server.origin);
  const err = await client.post("/", { authorization: "Bearer sk\r\nx-injected: 1" }, "x").catch((e: unknown) => e);
  expect(err).toBeInstanceOf(TypeError);
  expect((err as Error).message).toContain("authorization");
  expect(server.connections).toBe(0);
});

test("a server that answers before it has read the whole request: the reply comes through, the connection is not kept", async () => {
  let conns = 0;
  const listener = Bun.listen<{ answered: boolean }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        conns++;
        s.data = { answered: false };
      },
      data(s) {
        if (s.data.answered) return;
        s.data.answered = true;
        s.write(ok("too large", "x-early: 1\r\n").replace("200 OK", "413 Payload Too Large"));
      },
    },
  });
  stops.push(() => listener.stop(true));
  const client = new Http1Client(new URL(`http://127.0.0.1:${listener.port}`));
  const big = "y".repeat(16 * 1024 * 1024);
  const first = await client.post("/", {}, big);
  expect(first.status).toBe(413);
  expect(await first.text()).toBe("too large");
  const second = await client.post("/", {}, "small");
  expect(second.status).toBe(413);
  await second.text();
  expect(conns).toBe(2);
});

test("a kept idle connection does not hold the process open", async () => {
  const server = Bun.serve({ hostname: "127.0.0.1", port: 0, idleTimeout: 0, fetch: () => new Response("hi") });
  stops.push(() => void server.stop(true));
  const script = `import { Http1Client } from ${JSON.stringify(join(import.meta.dir, "../../src/runners/openai/http1.ts"))};
const reply = await new Http1Client(new URL("http://127.0.0.1:${server.port}")).post("/", {}, "x");
console.log(await reply.text());`;
  const proc = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
  const timer = setTimeout(() => proc.kill("SIGKILL"), 20_000);
  const code = await proc.exited;
  clearTimeout(timer);
  expect(await new Response(proc.stdout).text()).toBe("hi\n");
  expect(code).toBe(0);
});

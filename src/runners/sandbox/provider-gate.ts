/**
 * The provider network of a sandboxed stage (`network: "provider"`), the
 * side outside the sandbox: a directory of Unix sockets that the sandbox
 * sees, one per way out, each allowing only the hosts the stage may reach.
 *
 * - `proxy.sock`: an HTTP proxy. `CONNECT host:port` (HTTPS) and plain
 *   requests in absolute form are let through to an allowed `host:port`
 *   only; anything else gets 403 and nothing is connected. Inside, the
 *   stage reaches it as HTTPS_PROXY / HTTP_PROXY (net-init.ts listens on
 *   the sandbox's own loopback and forwards to this socket).
 * - `tcp-PORT.sock`, for each allowed endpoint on this machine's loopback
 *   (a local model server, the tests' fake provider): a plain tunnel to
 *   127.0.0.1:PORT, which net-init.ts offers inside on the same port, so a
 *   base URL like http://127.0.0.1:PORT works unchanged (NO_PROXY covers
 *   loopback inside).
 *
 * The HTTP parsing is node:http's; this file only decides and pipes. The
 * gate lives as long as the stage's process and is closed with it.
 *
 * An allowed host that does not resolve here (names are resolved outside,
 * by the gate: inside there is no DNS) is answered 502 with one sentence and
 * a hint, which is also handed to `onProblem` once per host (the runner
 * writes it to the stage's stderr, so the stage's failure quotes it).
 */

import { mkdtempSync } from "node:fs";
import type { Server as HttpServer } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { removeTree } from "../../shared/remove-tree.ts";

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1", "[::1]"]);
/** getaddrinfo's answers for a name that does not resolve (or not now). */
const UNRESOLVED = new Set(["ENOTFOUND", "EAI_AGAIN", "EAI_NONAME", "EAI_FAIL"]);

export interface ProviderGate {
  /** The socket directory (bound into the sandbox at the same path). */
  dir: string;
  /** Loopback ports tunnelled (offered inside on the same port). */
  loopbackPorts: number[];
  close(): void;
}

/** `host:port` of a URL (its default port when it names none). */
export function endpointOf(url: string): string | undefined {
  try {
    const u = new URL(url);
    const port = u.port || (u.protocol === "https:" ? "443" : u.protocol === "http:" ? "80" : "");
    return port ? `${u.hostname}:${port}` : undefined;
  } catch {
    return undefined;
  }
}

function split(endpoint: string): { host: string; port: number } {
  const at = endpoint.lastIndexOf(":");
  return { host: endpoint.slice(0, at).replace(/^\[|\]$/g, ""), port: Number(endpoint.slice(at + 1)) };
}

/**
 * Opens the gate for `endpoints` (host:port each). Synchronous: a Unix
 * socket is bound and listening when listen() returns (Bun and Node both),
 * so a stage started right after connects into its backlog.
 */
export function openProviderGate(endpoints: readonly string[], onProblem: (sentence: string) => void = () => {}): ProviderGate {
  const dir = mkdtempSync(join(tmpdir(), "atomic-net-"));
  const told = new Set<string>();
  /** What the stage is told of a failed connection: a sentence of ours for a name that does not resolve. */
  const why = (host: string, e: Error & { code?: string }): string => {
    if (!UNRESOLVED.has(e.code ?? "")) return `atomic sandbox: ${e.message}`;
    const sentence = `atomic sandbox: the provider host ${host} cannot be resolved on this machine (${e.message}); hint: check the provider's base URL (or the stage's sandbox hosts) and this machine's DNS`;
    if (!told.has(host)) {
      told.add(host);
      onProblem(sentence);
    }
    return sentence;
  };
  const allowed = new Set(endpoints.map((e) => e.toLowerCase()));
  const servers: (Server | HttpServer)[] = [];
  const sockets = new Set<Socket>();
  const track = (s: Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => s.destroy());
  };

  // node:http is loaded by the first gate, not with this file: every atomic process imports it (the runners'),
  // few ever open a gate, and loading node:http cost each process 2-7 ms of its start (bench/agent-stages.ts).
  const { createServer: createHttpServer, request: httpRequest } = process.getBuiltinModule("node:http");
  const proxy = createHttpServer((req, res) => {
    let target: URL;
    try {
      target = new URL(req.url ?? "");
    } catch {
      res.writeHead(400).end("atomic sandbox: a proxy request needs an absolute URL\n");
      return;
    }
    const endpoint = `${target.hostname}:${target.port || (target.protocol === "https:" ? "443" : "80")}`.toLowerCase();
    if (target.protocol !== "http:" || !allowed.has(endpoint)) {
      res.writeHead(403).end(`atomic sandbox: ${endpoint} is not the stage's provider\n`);
      return;
    }
    const upstream = httpRequest(target, { method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on("error", (e) => {
      if (!res.headersSent) res.writeHead(502);
      res.end(`${why(target.hostname, e)}\n`);
    });
    req.pipe(upstream);
  });
  proxy.on("connect", (req, client: Socket, head: Buffer) => {
    track(client);
    const endpoint = (req.url ?? "").toLowerCase();
    if (!allowed.has(endpoint)) {
      client.end(`HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
      return;
    }
    const { host, port } = split(endpoint);
    const upstream = connect(port, host, () => {
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    track(upstream);
    upstream.on("error", (e) => {
      const body = Buffer.from(`${why(host, e)}\n`);
      client.end(`HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
    });
  });
  servers.push(proxy);

  const loopbackPorts: number[] = [];
  for (const e of allowed) {
    const { host, port } = split(e);
    if (!LOOPBACK.has(host) || loopbackPorts.includes(port)) continue;
    loopbackPorts.push(port);
    const tunnel = createServer((client) => {
      track(client);
      const upstream = connect(port, host === "localhost" ? "127.0.0.1" : host);
      track(upstream);
      upstream.on("error", () => client.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
    });
    servers.push(tunnel);
  }
  proxy.listen(join(dir, "proxy.sock"));
  for (const [i, port] of loopbackPorts.entries()) servers[i + 1]!.listen(join(dir, `tcp-${port}.sock`));
  return {
    dir,
    loopbackPorts,
    close() {
      for (const s of servers) s.close();
      for (const s of sockets) s.destroy();
      removeTree(dir);
    },
  };
}

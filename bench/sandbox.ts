/**
 * Stage sandboxes (docs/design/sandbox.md): what they add.
 *
 * 1. Start: the shell runner (in this process, as a worker runs it) starts
 *    `/bin/sh -c true` and waits for its result, sandboxed (bubblewrap,
 *    network "none") and not, alternating, 40 each. Figure: the median
 *    sandboxed run; baseline: the median unsandboxed one; target: at most
 *    20 ms more (absolute; the ratio is printed for information).
 * 2. The provider proxy: 200 GETs to a local HTTP server straight and 200
 *    through the provider gate's proxy socket (provider-gate.ts: the
 *    request in absolute form over its Unix socket, forwarded to the
 *    server), alternating, each a new connection as a proxied agent makes
 *    one per request at worst. Target: the proxy adds at most 5 ms at the
 *    median. (The hop inside the sandbox, net-init.ts's loopback listener,
 *    is one more socket pipe, not measured here.)
 * Needs bwrap (scripts/install-bubblewrap.sh).
 */

import { mkdirSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { ShellRunner } from "../src/runners/shell/shell-runner.ts";
import { openProviderGate } from "../src/runners/sandbox/provider-gate.ts";
import type { StageRequest } from "../src/runners/types.ts";
import { alternate, fmt, median, tempDir, type Bench, type Result } from "./lib.ts";

const STARTS = 40;
const REQUESTS = 200;

async function stage(dir: string, n: number, sandbox: boolean): Promise<number> {
  const req: StageRequest = {
    runId: "bench",
    stageKey: String(n),
    stageName: "s",
    attempt: 1,
    runner: "shell",
    command: "true",
    cwd: join(dir, "work"),
    artifactDir: join(dir, "a", String(n)),
    ...(sandbox ? { sandbox: { network: "none", read: [], write: [], hosts: [], hidden: [join(dir, "a")] } } : {}),
  };
  const t = performance.now();
  const r = await new ShellRunner().start(req, () => {}).result;
  if (r.status !== "completed") throw new Error(`the stage failed: ${r.error?.message}`);
  return performance.now() - t;
}

function get(opts: { socketPath?: string; port?: number; path: string }): Promise<number> {
  const t = performance.now();
  return new Promise((resolve, reject) => {
    const req = request({ ...(opts.socketPath ? { socketPath: opts.socketPath } : { host: "127.0.0.1", port: opts.port }), path: opts.path, agent: false }, (res) => {
      res.resume();
      res.on("end", () => (res.statusCode === 200 ? resolve(performance.now() - t) : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on("error", reject);
    req.end();
  });
}

const bench: Bench = {
  name: "sandbox",
  title: "stage sandboxes: a sandboxed shell stage's start, and the provider proxy's cost per request",
  async run(): Promise<Result[]> {
    const dir = tempDir("atomic-bench-sandbox-");
    mkdirSync(join(dir, "work"));
    let n = 0;
    const starts = await alternate(STARTS, { plain: () => stage(dir, n++, false), boxed: () => stage(dir, n++, true) });
    const plain = median(starts.plain);
    const boxed = median(starts.boxed);

    const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok") });
    const gate = openProviderGate([`127.0.0.1:${server.port}`]);
    try {
      const url = `http://127.0.0.1:${server.port}/`;
      const calls = await alternate(REQUESTS, { direct: () => get({ port: server.port, path: "/" }), proxied: () => get({ socketPath: join(gate.dir, "proxy.sock"), path: url }) });
      const direct = median(calls.direct);
      const proxied = median(calls.proxied);
      return [
        {
          bench: "sandbox",
          label: "sandboxed shell stage (true), median start to result",
          value: boxed,
          unit: "ms",
          baseline: { label: "the same stage unsandboxed", value: plain, unit: "ms" },
          ratio: { value: boxed / plain, meaning: "sandboxed ÷ unsandboxed" },
          target: { text: `at most 20 ms more (${fmt(boxed - plain)} ms more)`, ok: boxed - plain <= 20 },
        },
        {
          bench: "sandbox",
          label: "GET through the provider proxy, median",
          value: proxied,
          unit: "ms",
          baseline: { label: "the same GET straight to the server", value: direct, unit: "ms" },
          ratio: { value: proxied / direct, meaning: "proxied ÷ direct" },
          target: { text: `at most 5 ms more at p50 (${fmt(proxied - direct)} ms more)`, ok: proxied - direct <= 5 },
        },
      ];
    } finally {
      gate.close();
      server.stop(true);
    }
  },
};

export default bench;

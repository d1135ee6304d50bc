/**
 * Spans that never reach the OTLP receiver are counted, not lost silently:
 * `atomic run` processes (real binary) export a one-shell-stage run's two
 * spans (invoke_workflow, shell) to a receiver that is down (connection
 * refused), then to one that takes the request and never answers (the
 * drive's last flush gives up), and `atomic serve`, another process reading
 * the same journal, shows each loss in `atomic_trace_spans_dropped_total`;
 * a run whose receiver takes its spans adds nothing. Every run completes
 * with one warning and no more.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";
import { startOtlpReceiver } from "../helpers/otlp-receiver.ts";
import { parseMetrics, sum } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const ONE_SHELL = join(import.meta.dir, "fixtures", "one-shell.ts");

e2eTest(
  "spans a receiver that is down or never answers did not take are counted in atomic_trace_spans_dropped_total",
  async () => {
    const home = makeTempDir();
    const serve = spawnAtomic(["serve", "--port", "0"], { home });
    const login = (await lineWatcher(serve.stdout).waitFor(/^status page: /)).slice("status page: ".length).trim();
    const [, url, token] = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
    const dropped = async () => {
      const body = await (await fetch(`${url}metrics`, { headers: { authorization: `Bearer ${token}` } })).text();
      return sum(parseMetrics(body), "atomic_trace_spans_dropped_total", {});
    };
    const run = async (endpoint: string) => {
      const r = await runAtomic(["run", ONE_SHELL, "--json"], { home, env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint } });
      expect(r.code).toBe(0);
      return r;
    };

    // a receiver that is down: both spans are lost, and counted
    const down = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    const closedPort = down.port;
    await down.stop(true);
    expect(await dropped()).toBe(0);
    const refused = await run(`http://127.0.0.1:${closedPort}`);
    expect(refused.stderr.trim().split("\n")).toEqual([expect.stringMatching(/^warning: traces could not be sent to the OTLP receiver/)]);
    expect(await dropped()).toBe(2);

    // a receiver that takes the request and never answers: the run still ends, its spans are counted
    let held = 0;
    const release: (() => void)[] = [];
    const slow = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: () => {
        held++;
        return new Promise<Response>((resolve) => release.push(() => resolve(new Response())));
      },
    });
    try {
      const r = await run(`http://127.0.0.1:${slow.port}`);
      expect(held).toBeGreaterThan(0);
      expect(r.stderr).toContain("no answer within 3 s");
      expect(await dropped()).toBe(4);
    } finally {
      for (const go of release) go();
      await slow.stop(true);
    }

    // a receiver that takes them: two spans arrive, nothing more is counted
    const otlp = await startOtlpReceiver();
    try {
      const r = await run(otlp.url);
      expect(r.stderr).toBe("");
      expect(otlp.spans.items.map((s) => s.name).sort()).toEqual(["invoke_workflow one-shell", "shell hello"]);
      expect(await dropped()).toBe(4);
    } finally {
      await otlp.close();
    }
    serve.kill("SIGINT");
    await serve.exited;
  },
  90_000,
);

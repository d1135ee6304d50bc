/**
 * Spans that never reach the OTLP receiver are counted, not lost silently:
 * `atomic run` processes (real binary) export a one-shell-stage run's two
 * spans (invoke_workflow, shell) to a receiver that is down (connection
 * refused), then to one that takes the request and never answers (the
 * drive's last flush gives up), and `atomic serve`, another process reading
 * the same journal, shows each loss in `atomic_trace_spans_dropped_total`;
 * a run whose receiver takes its spans adds nothing, nor does one whose
 * receiver answers after the default 3 s when OTEL_EXPORTER_OTLP_TIMEOUT
 * gives it longer, nor one whose batch sent while the run went on is
 * answered after the drive's last batch. Every run completes
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
const GATED = join(import.meta.dir, "fixtures", "gated-shells.ts");

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
    const run = async (endpoint: string, env: Record<string, string> = {}) => {
      const r = await runAtomic(["run", ONE_SHELL, "--json"], { home, env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, ...env } });
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

    // a batch on its way when the drive ends (sent by the batch processor's timer while the run went on, its
    // answer slower than the last batch's): the drive waits for it too, and nothing is lost or counted
    const gate = join(home, "gate");
    expect(Bun.spawnSync(["mkfifo", gate]).exitCode).toBe(0);
    const otlp2 = await startOtlpReceiver(); // decodes; the proxy below paces its answers
    const seen: string[][] = [];
    let firstAnswered = false;
    const paced = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(req) {
        const body = await req.arrayBuffer();
        const forwarded = await fetch(`${otlp2.url}/v1/traces`, { method: "POST", body, headers: { "content-type": req.headers.get("content-type") ?? "" } });
        seen.push(otlp2.spans.items.slice(seen.flat().length).map((x) => x.name));
        if (seen.length > 1) return new Response(forwarded.body, forwarded);
        // The first batch (the first stage's span): the run may go on, and this answer comes 2 s after the last batch came.
        Bun.spawn(["sh", "-c", `echo go > '${gate}'`]);
        await otlp2.spans.first((x) => x.name === "invoke_workflow gated-shells");
        await new Promise((resolve) => setTimeout(resolve, 2_000));
        firstAnswered = true;
        return new Response(forwarded.body, forwarded);
      },
    });
    try {
      const r = await runAtomic(["run", GATED, "--json", "--input", `gate=${gate}`], { home, env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${paced.port}`, OTEL_EXPORTER_OTLP_TIMEOUT: "60000" } });
      expect(r.code).toBe(0);
      expect(seen).toEqual([["shell first"], expect.arrayContaining(["shell second", "invoke_workflow gated-shells"])]);
      expect(firstAnswered).toBe(true);
      expect(r.stderr).toBe("");
      expect(await dropped()).toBe(4);
    } finally {
      await paced.stop(true);
      await otlp2.close();
    }

    // a receiver slower to answer than the default 3 s, with an export timeout that allows for it
    // (OTEL_EXPORTER_OTLP_TIMEOUT): the last flush waits that long, and nothing is lost
    let answered = 0;
    const late = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      // The receiver's own pace (a collector on a busy machine), not a wait of the test's.
      fetch: () =>
        new Promise<Response>((resolve) =>
          setTimeout(() => {
            answered++;
            resolve(new Response());
          }, 4_000),
        ),
    });
    try {
      const r = await run(`http://127.0.0.1:${late.port}`, { OTEL_EXPORTER_OTLP_TIMEOUT: "60000" });
      expect(answered).toBeGreaterThan(0);
      expect(r.stderr).toBe("");
      expect(await dropped()).toBe(4);
    } finally {
      await late.stop(true);
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
  120_000,
);

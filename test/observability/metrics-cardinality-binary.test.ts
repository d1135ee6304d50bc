/**
 * `/metrics` labels stay bounded, through the real binary: `atomic serve`
 * scrapes a home whose journal holds 10 finished agent runs (three
 * workflows, two models), then the same home after 990 more were recorded
 * into it by another process while the server kept running. Both bodies
 * are parsed with the Prometheus text parser the other observability
 * tests use: 1,000 runs make exactly the series 10 made, no label value
 * and no line holds a run id, and every run's usage is counted once
 * under its workflow and model.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { openJournal } from "../../src/journal/open.ts";
import { lineWatcher, spawnAtomic } from "../helpers/atomic.ts";
import { seedRun } from "../helpers/seed-runs.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";
import { parseMetrics, sum, type Sample } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const usage = (model: string) => ({ inputTokens: 10, outputTokens: 2, cacheReadTokens: 3, cacheWriteTokens: 0, costMicroUsd: 7, turns: 1, model });

/** Each series: its name and labels, one string. */
const seriesOf = (samples: Sample[]) => samples.map((s) => `${s.name}${JSON.stringify(Object.entries(s.labels).sort())}`).sort();

e2eTest("labels stay bounded: after 1,000 runs of three workflows and two models, atomic serve's /metrics has the series it had at 10, and no run id", async () => {
  const home = makeTempDir();
  const ids: string[] = [];
  const record = async (from: number, to: number) => {
    const journal = await openJournal({ home, durability: "normal" });
    try {
      for (let i = from; i < to; i++) ids.push(await seedRun(journal, { stages: 1, workflow: `wf-${i % 3}`, status: i % 10 === 0 ? "failed" : "completed", agent: { runner: "openai", usage: usage(`model-${i % 2}`) } }));
    } finally {
      await journal.close();
    }
  };
  await record(0, 10);

  const serve = spawnAtomic(["serve", "--port", "0"], { home });
  try {
    const login = (await lineWatcher(serve.stdout).waitFor(/^status page: /)).slice("status page: ".length).trim();
    const [, url, token] = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
    const scrape = async () => {
      const res = await fetch(`${url}metrics`, { headers: { authorization: `Bearer ${token}` } });
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toContain("application/openmetrics-text");
      const body = await res.text();
      expect(body.endsWith("# EOF\n")).toBe(true);
      return { body, samples: parseMetrics(body) };
    };

    const ten = await scrape();
    expect(sum(ten.samples, "atomic_runs", { status: "completed" })).toBe(9);
    await record(10, 1000);
    const thousand = await scrape();
    expect(sum(thousand.samples, "atomic_runs", { status: "completed" })).toBe(900);
    expect(sum(thousand.samples, "atomic_runs", { status: "failed" })).toBe(100);

    // the same series, label for label
    expect(seriesOf(thousand.samples)).toEqual(seriesOf(ten.samples));
    // no run id: not as a label value, not anywhere in the body
    const values = new Set(thousand.samples.flatMap((s) => Object.values(s.labels)));
    expect(ids.filter((id) => values.has(id) || thousand.body.includes(id))).toEqual([]);
    // each run's usage once, under its workflow and model
    expect(sum(thousand.samples, "atomic_tokens_total", { kind: "input" })).toBe(10_000);
    expect(sum(thousand.samples, "atomic_tokens_total", { kind: "cache_read" })).toBe(3_000);
    expect(sum(thousand.samples, "atomic_tokens_total", { workflow: "wf-0", model: "model-0", kind: "input" })).toBe(167 * 10);
    expect(Math.round(sum(thousand.samples, "atomic_cost_usd_total", {}) * 1_000_000)).toBe(7_000);
    expect(sum(thousand.samples, "atomic_stages_started_total", {})).toBe(1000);
  } finally {
    serve.kill("SIGINT");
    await serve.exited;
  }
}, 120_000);

/**
 * A run's usage as the status page shows it, in headless Chromium
 * (test/status/browser-support.ts) against `atomic serve` of the run's
 * home: the cost page (/usage: its totals, its day's bar, the run's
 * workflow row and the costliest stages) and the run's own page (its
 * totals and each stage's usage), to the token and the micro-dollar, as
 * the page formats them. The home holds this one run (the cost page sums
 * every run of the last 30 days).
 */

import { expect } from "bun:test";
import { formatCost } from "../../src/runners/usage.ts";
import { HAVE_CHROMIUM, CHROMIUM, keptPage, launchBrowser, leavePageAndStopServer, signIn, startServe } from "../status/browser-support.ts";
import { times, type Ledger } from "./usage-sums.ts";

declare const document: { body: { dataset: Record<string, string | undefined> }; querySelector(selector: string): { textContent: string | null } | null };

const tokens = (u: Ledger) => u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens;
const n = (x: number) => x.toLocaleString("en-US");

/** The end of the last check on the file's kept page: the checks of tests running side by side take turns on it. */
let turn: Promise<void> = Promise.resolve();

/**
 * Every stage in `stages` used `each`: the cost page and the run's page show their sums. `env`: atomic serve's.
 * On the file's kept page (status/browser-support.ts `keptPage`: a new window is about 2 CPU-seconds of
 * Chromium's), one check at a time.
 */
export async function expectPageUsage(home: string, runId: string, workflow: string, stages: readonly string[], each: Ledger, env?: Record<string, string>): Promise<void> {
  if (!HAVE_CHROMIUM) throw new Error(`the page's usage is checked in Chromium, and ${CHROMIUM} is missing (scripts/setup.sh installs it)`);
  const before = turn;
  const mine = Promise.withResolvers<void>();
  turn = mine.promise;
  try {
    await before;
    await checkPageUsage(home, runId, workflow, stages, each, env);
  } finally {
    mine.resolve();
  }
}

async function checkPageUsage(home: string, runId: string, workflow: string, stages: readonly string[], each: Ledger, env?: Record<string, string>): Promise<void> {
  await launchBrowser();
  const total = times(each, stages.length);
  const { proc: server, url, login } = await startServe(home, env);
  const { page, errors } = await keptPage(1400, 900);
  try {
    await signIn(page, login, url);
    await page.goto(`${url}usage?by=workflow&since=30d`);
    await page.waitForFunction(() => document.body.dataset.usageLoaded === "1", undefined, { timeout: 15_000 });
    // The API the page reads answers `atomic usage --json` (helpers/usage-sums.ts checks that against the fake); turns are its count.
    const api = (await page.evaluate(async () => (await fetch("/api/usage?by=workflow&since=30d")).json())) as { total: { turns: number } };
    const cells = await page.$$eval("#usage-totals > div", (els) => Object.fromEntries(els.map((e) => [e.querySelector("span")?.textContent ?? "", e.querySelector("b")?.textContent ?? ""])));
    expect(cells).toEqual({
      cost: formatCost(total),
      runs: "1",
      "input tokens": n(total.inputTokens),
      "cache reads": n(total.cacheReadTokens),
      "cache writes": n(total.cacheWriteTokens),
      "output tokens": n(total.outputTokens),
      turns: n(api.total.turns),
    });
    // The day's bar carries the exact micro-dollars.
    expect(await page.$$eval("#day-chart g.day", (els) => els.map((e) => Number(e.getAttribute("data-cost"))))).toEqual([total.costMicroUsd]);
    const row = await page.$$eval("#usage-table tbody tr", (trs) => trs.map((tr) => Object.fromEntries([...tr.querySelectorAll("td")].map((td) => [td.getAttribute("data-label"), td.textContent]))));
    expect(row).toEqual([{ workflow, runs: "1", in: n(total.inputTokens), cached: n(total.cacheReadTokens), "cache write": n(total.cacheWriteTokens), out: n(total.outputTokens), turns: n(api.total.turns), cost: formatCost(total) }]);
    const costliest = await page.$$eval("#usage-top-stages tbody tr", (trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent)));
    expect(costliest.sort()).toEqual(stages.slice(0, 5).map((name) => [name, "1", n(tokens(each)), formatCost(each)]).sort());
    expect(await page.getAttribute("#usage-top-runs a", "href")).toBe(`/runs/${runId}`);

    // The run's page: its totals, then each stage's line.
    await page.goto(`${url}runs/${runId}`);
    await page.waitForFunction(() => document.body.dataset.runStatus === "completed", undefined, { timeout: 15_000 });
    expect(await page.textContent("#t-cost b")).toBe(formatCost(total));
    expect(await page.textContent("#t-tokens b")).toBe(String(tokens(total)));
    for (const name of stages) {
      await page.click(`svg.graph g.node[data-name="${name}"]`);
      await page.waitForFunction((s) => document.querySelector("#stage-name")?.textContent === s, name);
      expect(await page.textContent("#stage-usage")).toBe(`${tokens(each)} tokens, ${formatCost(each)}`);
    }
    expect(errors).toEqual([]);
  } finally {
    await leavePageAndStopServer(page, server);
  }
}

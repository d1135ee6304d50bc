/**
 * The cost page (/usage) in headless Chromium against the real binary,
 * after a mixed run with paid model calls (a failed attempt, its retry, a
 * child run's stage; the model is test/helpers/fake-openai.ts): its figures
 * are `atomic usage`'s (GET /api/usage answers what `atomic usage --json`
 * prints), its day chart has the day's money, the costliest runs link to
 * their pages; the grouping is picked on the page; a time it cannot read
 * is said inline. The run page shows a stage's usage and the run's, for a
 * run whose second stage continues the first one's session, as the fake
 * billed them (tokens and micro-dollars as the page formats them).
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, makeTempDir } from "../e2e/support.ts";
import { inOrder, startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "./browser-support.ts";

declare const document: { body: { dataset: Record<string, string | undefined> }; querySelector(selector: string): { textContent: string | null } | null };

const MIXED = join(import.meta.dir, "..", "observability", "fixtures", "mixed.ts");
const CONTINUED = join(import.meta.dir, "fixtures", "continued.ts");

beforeAll(launchBrowser);
afterEach(cleanupWhenIdle);
afterAll(async () => {
  await releaseBrowser();
  await cleanupNow();
});

describe.skipIf(!HAVE_CHROMIUM)("the cost page in Chromium", () => {
  test("the figures of atomic usage, a bar per day, the costliest runs and stages; grouping picked on the page; a bad time inline", async () => {
    const home = makeTempDir();
    const fake = await startFakeOpenAI(
      inOrder(
        toolCall("list", {}, { usage: { prompt: 100, completion: 10, cached: 40, cost: 0.000123 } }),
        { status: 401, body: '{"error":{"message":"bad key"}}' },
        text("retried", { prompt: 200, completion: 20, cost: 0.000456 }),
        text("from the child", { prompt: 7, completion: 3, cost: 0.000018 }),
      ),
    );
    let runId: string;
    try {
      const r = await runAtomic(["run", MIXED, "--json"], { home, env: { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" } });
      expect(r.code).toBe(0);
      runId = JSON.parse(r.stdout.trim().split("\n").at(-1)!).runId;
    } finally {
      await fake.close();
    }
    const cli = JSON.parse((await runAtomic(["usage", "--by", "stage", "--since", "1d", "--json"], { home })).stdout);
    expect(cli.total.costMicroUsd).toBe(123 + 456 + 18);
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage(1400, 900);
    try {
      await signIn(page, login, url);
      await page.click("#nav-usage");
      await page.waitForFunction(() => document.body.dataset.usageLoaded === "1", undefined, { timeout: 15_000 });
      expect(page.url()).toBe(`${url}usage`);
      // the API answers what the CLI prints (since: the same instant, so compare the rest)
      const api = (await page.evaluate(async () => (await fetch("/api/usage?by=stage&since=1d")).json())) as Record<string, unknown>;
      const { type: _type, since: _s1, ...cliRest } = cli;
      const { since: _s2, ...apiRest } = api;
      expect(apiRest).toEqual(cliRest);

      expect(await page.textContent("#usage-cost b")).toBe("$0.000597");
      const day = new Date().toISOString().slice(0, 10);
      expect(await page.$$eval("#day-chart g.day", (els) => els.map((e) => [e.getAttribute("data-day"), e.getAttribute("data-cost")]))).toEqual([[day, "597"]]);
      expect(await page.$$eval("#usage-table tbody tr td:first-child", (els) => els.map((e) => e.textContent))).toEqual(["mixed"]);
      expect(await page.getAttribute("#usage-top-runs a", "href")).toBe(`/runs/${runId}`);
      const stageNames = await page.$$eval("#usage-top-stages tbody tr td:first-child", (els) => els.map((e) => e.textContent));
      expect(stageNames).toEqual(cli.groups.map((g: { key: string }) => g.key));

      await page.selectOption("#usage-by", "model");
      await page.waitForFunction(() => document.body.dataset.usageLoaded === "2", undefined, { timeout: 15_000 });
      expect(page.url()).toBe(`${url}usage?by=model&since=30d`);
      const models = JSON.parse((await runAtomic(["usage", "--by", "model", "--json"], { home })).stdout);
      expect(await page.$$eval("#usage-table tbody tr td:first-child", (els) => els.map((e) => e.textContent))).toEqual(models.groups.map((g: { key: string }) => g.key));

      await page.fill("#usage-since", "last week");
      await page.press("#usage-since", "Enter");
      await page.waitForSelector("#usage-problem", { timeout: 15_000 });
      expect(await page.textContent("#usage-problem")).toBe('since "last week" is neither a date nor an age (use an ISO date or time (2026-12-01, 2026-12-01T09:30Z) or an age like 90m, 2h, 7d)');
      // the refused time above (one per report the page asked for), as Chromium logs it; nothing else
      expect([...new Set(errors)]).toEqual(["Failed to load resource: the server responded with a status of 400 (Bad Request)"]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);
  test("the run page: a continued stage's usage and the run's, to the token and the micro-dollar the fake billed", async () => {
    const home = makeTempDir();
    // what the fake bills: the first call, then the continued one (its whole conversation again, partly cached)
    const billed = [
      { prompt: 100, cached: 40, completion: 10, cost: 0.000123 },
      { prompt: 230, cached: 100, completion: 20, cost: 0.000456 },
    ];
    const fake = await startFakeOpenAI(inOrder(text("noted: 42", billed[0]), text("you gave 42", billed[1])));
    let runId: string;
    try {
      const r = await runAtomic(["run", CONTINUED, "--json"], { home, env: { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" } });
      expect(r.code).toBe(0);
      runId = JSON.parse(r.stdout.trim().split("\n").at(-1)!).runId;
      // the continued call carried the first stage's conversation
      expect(JSON.stringify(fake.requests.at(-1)!.body.messages)).toContain("noted: 42");
    } finally {
      await fake.close();
    }
    // tokens: input (prompt less cached) + cached + completion
    const tokens = (b: (typeof billed)[number]) => b.prompt + b.completion;
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${runId}`);
      await page.waitForFunction(() => document.body.dataset.runStatus === "completed", undefined, { timeout: 15_000 });
      expect(await page.textContent("#t-tokens b")).toBe(String(tokens(billed[0]!) + tokens(billed[1]!)));
      expect(await page.textContent("#t-cost b")).toBe("$0.000579");
      for (const [name, b, cost] of [["first", billed[0]!, "$0.000123"], ["second", billed[1]!, "$0.000456"]] as const) {
        await page.click(`svg.graph g.node[data-name="${name}"]`);
        await page.waitForFunction((n) => document.querySelector("#stage-name")?.textContent === n, name);
        expect(await page.textContent("#stage-usage")).toBe(`${tokens(b)} tokens, ${cost}`);
      }
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);
});

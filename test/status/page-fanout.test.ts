/**
 * Fan-outs on a run's page, in headless Chromium against the real binary
 * (`atomic serve`; the runs made by `atomic run` or seeded in the journal):
 *
 * - A fan-out whose branches are several stages each, and one whose
 *   branches are child workflows, are each one box on the graph and one row
 *   on the timeline, with their branches counted; no arrow is drawn inside
 *   a closed box. Opened (from the timeline, from the graph), each branch's
 *   steps are drawn, and a row each on the timeline.
 * - A fan-out of 1,000 branches opened: the timeline is a list that scrolls
 *   in its own frame and draws only the rows in view (far fewer than 1,000
 *   in the page at once), yet every branch's row is reached by scrolling and
 *   opens its stage; a stage picked on the graph is scrolled into view.
 *
 * Each page is checked for clipped elements at 1400x900 and 390x844
 * (layout-check.ts).
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { killSpawned } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { HAVE_CHROMIUM, closePageAndServer, launchBrowser, newPage, releaseBrowser, seededHome, signIn, startRun, startServe } from "./browser-support.ts";
import { checkLayout } from "./layout-check.ts";

// Callbacks given to page.evaluate()/waitForFunction() run in the browser, where these exist.
declare const document: { querySelector(selector: string): unknown; querySelectorAll(selector: string): { length: number } };
declare function requestAnimationFrame(f: () => void): void;
interface Frame { scrollTop: number; scrollHeight: number; clientHeight: number; querySelectorAll(s: string): Iterable<{ getAttribute(n: string): string | null }>; getBoundingClientRect(): { top: number; bottom: number } }

beforeAll(launchBrowser);
afterAll(releaseBrowser);

afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

const rowTexts = (page: import("playwright-core").Page) => page.$$eval(".gantt .row", (rows) => rows.map((r) => r.textContent));
const nodeNames = (page: import("playwright-core").Page) => page.$$eval("svg.graph g.node[data-status]", (els) => els.map((e) => e.getAttribute("data-name")).sort());

/** Edges drawn backwards (ending left of where they start): an arrow inside a closed box would. */
const backwardEdges = (page: import("playwright-core").Page) =>
  page.$$eval("svg.graph path.edge", (paths) =>
    paths.filter((p) => {
      const n = (p.getAttribute("d") ?? "").match(/-?[\d.]+/g)!.map(Number);
      return n[n.length - 2]! < n[0]!;
    }).length,
  );

describe.skipIf(!HAVE_CHROMIUM)("fan-outs on a run's page", () => {
  test("branches of several stages and branches that are child workflows are each one box and one timeline row until opened", async () => {
    const home = makeTempDir();
    const run = await startRun(home, "branches.ts", []);
    expect(await run.proc.exited).toBe(0);
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage(1400, 900);
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      const fetches = page.locator('svg.graph g.fanout[data-label="fetch-* 6"]');
      const children = page.locator('svg.graph g.fanout[data-label="summarize 5"]');
      await fetches.waitFor({ timeout: 30_000 });
      // each counts its branches: six branches of two stages, five child runs
      expect(await fetches.getAttribute("data-counts")).toBe("6 done");
      expect(await children.getAttribute("data-counts")).toBe("5 done");
      expect(await fetches.locator("title").textContent()).toBe("fetch-* 6 (up to 2 steps a branch): 6 done (click to show each stage)");
      expect(await children.locator("title").textContent()).toBe("summarize 5 (child workflows): 5 done (click to show each stage)");
      expect(await nodeNames(page)).toEqual(["prepare", "publish"]);
      expect(await page.$$("svg.graph g.group")).toHaveLength(0);
      expect(await backwardEdges(page)).toBe(0);
      expect(await rowTexts(page)).toEqual(["prepare", "▸ fetch-* 6: 6 done", "▸ summarize 5: 5 done", "publish"]);
      await checkLayout(page, "fanout-branches-closed");

      // the branches of two stages, opened from the timeline: each stage on the graph, a row each
      await page.click('.gantt .row.fan[data-label="fetch-* 6"]');
      await page.waitForFunction(() => document.querySelectorAll("svg.graph g.node[data-status]").length === 14);
      const steps = Array.from({ length: 6 }, (_, i) => [`fetch-${i}`, `parse-${i}`]).flat();
      expect(await nodeNames(page)).toEqual(["prepare", "publish", ...steps].sort());
      expect((await rowTexts(page)).filter((t) => /^(fetch|parse)-\d$/.test(t ?? "")).sort()).toEqual([...steps].sort());
      expect(await backwardEdges(page)).toBe(0);
      // fetch-N leads to parse-N inside the open frame
      await page.click('svg.graph g.node[data-name="parse-3"]');
      await page.waitForFunction(() => (document.querySelector("#stage-stdout") as { textContent: string } | null)?.textContent === "parsed 3\n");

      // the child workflows, opened from the graph: a box each around its own stage, rows for them on the timeline
      await children.click();
      await page.waitForFunction(() => document.querySelectorAll("svg.graph g.group").length === 5);
      expect((await nodeNames(page)).filter((n) => n === "report")).toHaveLength(5);
      expect((await rowTexts(page)).filter((t) => t === "▸ summarize")).toHaveLength(5);
      expect((await rowTexts(page)).filter((t) => t === "report")).toHaveLength(5);
      await checkLayout(page, "fanout-branches-open");

      // closed again from the graph's header: one row again
      await page.click('svg.graph g.fanout.open[data-label="summarize 5"] .fan-head');
      await page.waitForFunction(() => document.querySelectorAll("svg.graph g.group").length === 0);
      expect(await rowTexts(page)).toContain("▸ summarize 5: 5 done");
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);

  test("a fan-out of 1,000 opened: the timeline scrolls in its frame drawing only the rows in view, and every branch is reached", async () => {
    const { home, runIds: [runId] } = await seededHome([{ stages: 1000, workflow: "wide" }]);
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage(1400, 900);
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${runId}`);
      await page.waitForSelector('.gantt .row.fan[data-label="stage-* 1000"]', { timeout: 30_000 });
      expect(await rowTexts(page)).toEqual(["▸ stage-* 1000: 1000 done"]);
      await page.click('.gantt .row.fan[data-label="stage-* 1000"]');
      await page.waitForFunction(() => document.querySelectorAll("svg.graph g.node[data-status]").length === 1000, undefined, { timeout: 60_000 });
      const frame = page.locator('.gantt .rows-frame[data-rows="1000"]');
      await frame.waitFor();
      expect(await page.textContent(".gantt .rows-note")).toBe("1000 rows: the list scrolls (400 or fewer are all shown at once)");
      const drawn = (await page.$$(".gantt .row")).length;
      expect(drawn).toBeGreaterThan(10);
      expect(drawn).toBeLessThan(200);
      await checkLayout(page, "fanout-1000-open");

      // scrolled a frame's height at a time, from top to bottom: every branch's row is drawn on the way
      const seen = await frame.evaluate(async (el) => {
        const f = el as unknown as Frame;
        const names = new Set<string>();
        const collect = () => { for (const r of f.querySelectorAll(".row")) names.add(r.getAttribute("data-name") ?? ""); };
        collect();
        while (f.scrollTop + f.clientHeight < f.scrollHeight) {
          f.scrollTop += f.clientHeight;
          await new Promise<void>((r) => requestAnimationFrame(() => requestAnimationFrame(() => r())));
          collect();
        }
        return [...names];
      });
      expect(seen.length).toBe(1000);
      expect(new Set(seen)).toEqual(new Set(Array.from({ length: 1000 }, (_, i) => `stage-${i}`)));
      expect((await page.$$(".gantt .row")).length).toBeLessThan(200);

      // the last branch's row opens its stage
      await page.click('.gantt .row[data-name="stage-999"]');
      await page.waitForFunction(() => (document.querySelector("#stage-stdout") as { textContent: string } | null)?.textContent === "output of stage-999\n");
      expect(await page.textContent("#stage-name")).toBe("stage-999");
      expect(await frame.evaluate((el) => (el as unknown as Frame).scrollTop)).toBeGreaterThan(20_000); // it stayed where it was scrolled to

      // a stage picked on the graph: its row is scrolled into the frame's view and marked
      await page.click('svg.graph g.node[data-name="stage-500"]');
      const row = page.locator('.gantt .row.sel[data-name="stage-500"]');
      await row.waitFor();
      const [f, r] = [await frame.boundingBox(), await row.boundingBox()];
      expect(r!.y).toBeGreaterThanOrEqual(f!.y - 0.5);
      expect(r!.y + r!.height).toBeLessThanOrEqual(f!.y + f!.height + 0.5);
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 180_000);
});

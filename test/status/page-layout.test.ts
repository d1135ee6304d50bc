/**
 * The console's layout in headless Chromium against the real binary, at a
 * laptop's 1400x900 and a phone's 390x844: the run list, a run page with a
 * long chain of stages, and the cost page; on each, no element reaches past
 * the screen's right edge or its container's, except inside the frames
 * that scroll on purpose (the graph, wide tables, output), which themselves
 * fit (checked by bounding boxes, not pixels; screenshots kept in
 * test-artifacts/status/). And the graph: fitted to its frame at first,
 * zoomed in with +, panned by dragging its background, fitted again.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "./browser-support.ts";
import { checkLayout } from "./layout-check.ts";

declare const document: { body: { dataset: Record<string, string | undefined> }; querySelector(s: string): unknown };
interface El { getBoundingClientRect(): { width: number }; clientWidth: number }

beforeAll(launchBrowser);
afterAll(releaseBrowser);
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

describe.skipIf(!HAVE_CHROMIUM)("the console's layout in Chromium", () => {
  test("list, run page and cost page fit 1400x900 and 390x844; the graph fits, zooms and pans", async () => {
    const home = makeTempDir();
    const chain = join(makeTempDir(), "chain.ts");
    writeFileSync(chain, `import { workflow } from "atomic";
export default workflow({ name: "a-workflow-with-a-rather-long-name-for-the-layout", async run(ctx) {
  for (let i = 0; i < 14; i++) await ctx.shell(\`step-number-\${i}-with-a-long-name\`, "true");
  return { done: "x".repeat(300) };
} });
`);
    const r = await runAtomic(["run", chain, "--json", "--tag", "team=a-rather-long-team-name", "--tag", "ticket=ENG-4127"], { home });
    expect(r.code).toBe(0);
    const runId = JSON.parse(r.stdout.trim().split("\n").at(-1)!).runId as string;
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage(1400, 900);
    try {
      await signIn(page, login, url);
      await page.waitForSelector(`tr[data-run="${runId}"]`, { timeout: 15_000 });
      await checkLayout(page, "list");

      await page.setViewportSize({ width: 1400, height: 900 });
      await page.goto(`${url}runs/${runId}`);
      await page.waitForFunction(() => document.body.dataset.runStatus === "completed", undefined, { timeout: 15_000 });
      const graph = () => page.evaluate(() => {
        const wrap = document.querySelector("#graph") as El & { scrollLeft: number };
        const svg = document.querySelector("svg.graph") as El & { dataset: Record<string, string> };
        return { zoom: Number(svg.dataset.zoom), svgWidth: svg.getBoundingClientRect().width, wrapWidth: wrap.clientWidth, scrollLeft: wrap.scrollLeft };
      });
      const fitted = await graph();
      expect(fitted.zoom).toBeLessThan(1); // 14 stages in a row are wider than the frame: fitted
      expect(fitted.svgWidth).toBeLessThanOrEqual(fitted.wrapWidth);
      await page.click("#zoom-in");
      await page.click("#zoom-in");
      const zoomed = await graph();
      expect(zoomed.zoom).toBeCloseTo(fitted.zoom * 1.25 * 1.25, 5);
      expect(zoomed.svgWidth).toBeGreaterThan(zoomed.wrapWidth);
      expect(await page.textContent("#zoom-level")).toBe(`${Math.round(zoomed.zoom * 100)}%`);
      // drag the background to the left: the frame scrolls right
      const box = (await page.locator("#graph").boundingBox())!;
      await page.mouse.move(box.x + box.width - 10, box.y + 4);
      await page.mouse.down();
      await page.mouse.move(box.x + 20, box.y + 4, { steps: 5 });
      await page.mouse.up();
      expect((await graph()).scrollLeft).toBeGreaterThan(100);
      // a node is still clicked, not dragged
      await page.click('svg.graph g.node[data-name="step-number-0-with-a-long-name"]', { force: true });
      await page.waitForFunction(() => (document.querySelector("#stage-name") as { textContent: string } | null)?.textContent === "step-number-0-with-a-long-name");
      await page.click("#zoom-fit");
      expect((await graph()).zoom).toBe(fitted.zoom);
      await checkLayout(page, "run");

      await page.setViewportSize({ width: 1400, height: 900 });
      await page.goto(`${url}usage`);
      await page.waitForFunction(() => document.body.dataset.usageLoaded === "1", undefined, { timeout: 15_000 });
      await checkLayout(page, "usage");
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);
});

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
import type { Page } from "playwright-core";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { ARTIFACTS, HAVE_CHROMIUM, closeBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "./browser-support.ts";

declare const document: { body: { dataset: Record<string, string | undefined> }; querySelector(s: string): unknown };
interface Box { left: number; right: number; width: number }
interface El { getBoundingClientRect(): Box; parentElement: El | null; tagName: string; id: string; className: unknown; scrollWidth: number; clientWidth: number }
declare const window: { innerWidth: number; getComputedStyle(e: El): { overflowX: string; display: string; position: string } };

beforeAll(launchBrowser);
afterAll(closeBrowser);
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

/** Elements of main that stick out of the screen or of their container (a scrolling frame's content excepted). */
function overflows(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const found: string[] = [];
    const name = (e: El) => `${e.tagName.toLowerCase()}${e.id ? `#${e.id}` : ""}${typeof e.className === "string" && e.className ? `.${e.className.split(" ").join(".")}` : ""}`;
    const scrolls = (e: El) => ["auto", "scroll", "hidden"].includes(window.getComputedStyle(e).overflowX);
    const walk = (e: El, inScroller: boolean) => {
      const box = e.getBoundingClientRect();
      const style = window.getComputedStyle(e);
      if (style.display !== "none" && box.width > 0 && !inScroller) {
        if (box.right > window.innerWidth + 0.5) found.push(`${name(e)} reaches ${Math.round(box.right)} px, past the screen's ${window.innerWidth}`);
        const parent = e.parentElement;
        if (parent && parent.tagName !== "BODY" && parent.tagName !== "HTML") {
          const pb = parent.getBoundingClientRect();
          if (box.right > pb.right + 0.5 || box.left < pb.left - 0.5) found.push(`${name(e)} (${Math.round(box.left)}-${Math.round(box.right)}) sticks out of ${name(parent)} (${Math.round(pb.left)}-${Math.round(pb.right)})`);
        }
      }
      const kids = (e as unknown as { children: ArrayLike<El> }).children;
      const inner = inScroller || scrolls(e);
      for (let i = 0; i < kids.length; i++) walk(kids[i]!, inner);
    };
    walk(document.querySelector("main") as El, false);
    return found.slice(0, 10);
  });
}

async function checkLayout(page: Page, what: string): Promise<void> {
  for (const [w, h] of [[1400, 900], [390, 844]] as const) {
    await page.setViewportSize({ width: w, height: h });
    await page.evaluate(() => new Promise((r) => (globalThis as unknown as { requestAnimationFrame(f: () => void): void }).requestAnimationFrame(() => r(null))));
    await page.screenshot({ path: join(ARTIFACTS, `layout-${what}-${w}x${h}.png`), fullPage: true });
    expect({ what, w, problems: await overflows(page) }).toEqual({ what, w, problems: [] });
  }
}

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

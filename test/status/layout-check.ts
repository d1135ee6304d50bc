/**
 * The console's layout check: at a laptop's 1400x900 and a phone's
 * 390x844, no element of the page's main part reaches past the screen's
 * right edge or out of its container, except inside the frames that scroll
 * on purpose (the graph, wide tables, output), which themselves fit
 * (bounding boxes, not pixels). A screenshot of each size is kept in
 * test-artifacts/status/. The page is left at the size it had.
 */

import { expect } from "bun:test";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { ARTIFACTS } from "./browser-support.ts";

declare const document: { querySelector(s: string): unknown };
interface Box { left: number; right: number; width: number }
interface El { getBoundingClientRect(): Box; parentElement: El | null; tagName: string; id: string; className: unknown; scrollWidth: number; clientWidth: number }
declare const window: { innerWidth: number; getComputedStyle(e: El): { overflowX: string; display: string; position: string } };

/** Elements of main that stick out of the screen or of their container (a scrolling frame's content excepted). */
export function overflows(page: Page): Promise<string[]> {
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

export async function checkLayout(page: Page, what: string): Promise<void> {
  const was = page.viewportSize();
  for (const [w, h] of [[1400, 900], [390, 844]] as const) {
    await page.setViewportSize({ width: w, height: h });
    await page.evaluate(() => new Promise((r) => (globalThis as unknown as { requestAnimationFrame(f: () => void): void }).requestAnimationFrame(() => r(null))));
    await page.screenshot({ path: join(ARTIFACTS, `layout-${what}-${w}x${h}.png`), fullPage: true });
    expect({ what, w, problems: await overflows(page) }).toEqual({ what, w, problems: [] });
  }
  if (was) await page.setViewportSize(was);
}


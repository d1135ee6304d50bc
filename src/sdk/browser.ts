/**
 * capturePage: visits a page in headless Chromium (driven by playwright-core,
 * a bundle of its own loaded on first use, src/sdk/playwright.ts, so a workflow that never captures pays nothing) and
 * saves what a person looking at it would see: one full-page PNG (the whole
 * document, however long) and a scroll sequence, viewport-sized PNGs from
 * the top down, one viewport apart, at most `scrollSteps` of them.
 *
 * The target is an http(s) URL, a file:// URL or a local path (made
 * absolute against `cwd`). A page that does not load (refused, no such
 * host, no such file, an HTTP error status, too slow) throws a
 * PageCaptureError whose message is one sentence with a hint; nothing is
 * written then. Chromium runs with a fresh profile (playwright's), without
 * its sandbox when this process is root (the sandbox refuses root). Every
 * browser started here is closed before the function returns or throws.
 */

import { mkdirSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { importEntry } from "../shared/entry-points.ts";

export interface CaptureOptions {
  /** The Chromium (or Chrome) program. */
  chromium: string;
  /** Where the PNGs go (made when missing). */
  dir: string;
  /** File name prefix: <name>-full.png, <name>-scroll-NN.png. */
  name: string;
  /** What a local path is relative to (default: this process's directory). */
  cwd?: string;
  /** Viewport (default 1280 x 800). */
  width?: number;
  height?: number;
  /** Most screenshots of the scroll sequence (default 6; 0: none). */
  scrollSteps?: number;
  /** How long the page may take to load (default 30 s). */
  timeoutMs?: number;
  /** An HTTP proxy for the page's requests (loopback bypasses it), e.g. a sandbox's provider gate. */
  proxy?: string;
  /** Chromium's own sandbox (default: on unless this process is root); off inside atomic's sandbox, which contains it. */
  chromiumSandbox?: boolean;
}

export interface PageCapture {
  /** The address visited. */
  url: string;
  title: string;
  /** The full-page PNG. */
  full: string;
  /** The scroll sequence's PNGs, top first. */
  scroll: string[];
  /** The document's height in CSS pixels. */
  pageHeight: number;
}

export class PageCaptureError extends Error {
  override name = "PageCaptureError";
  readonly code = "page_capture_failed";
  constructor(
    message: string,
    readonly target: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The address Chromium opens for a target: URLs as they are, a path as a file:// URL. */
export function pageUrl(target: string, cwd = process.cwd()): string {
  if (/^(https?|file):\/\//i.test(target)) return target;
  return pathToFileURL(isAbsolute(target) ? target : resolve(cwd, target)).href;
}

function firstLine(e: unknown): string {
  const m = e instanceof Error ? e.message : String(e);
  return m.split("\n")[0]!.replace(/^(?:(?:page\.)?goto: )+/, "").trim();
}

/** Visits `target` in headless Chromium and saves a full-page PNG and a scroll sequence; a page that does not load throws PageCaptureError (one sentence, a hint). */
export async function capturePage(target: string, opts: CaptureOptions): Promise<PageCapture> {
  const url = pageUrl(target, opts.cwd);
  const width = opts.width ?? 1280;
  const height = opts.height ?? 800;
  const steps = opts.scrollSteps ?? 6;
  const { chromium } = (await importEntry("sdk/playwright.ts")) as unknown as typeof import("./playwright.ts");
  let browser: Awaited<ReturnType<typeof chromium.launch>>;
  try {
    browser = await chromium.launch({
      executablePath: opts.chromium,
      args: ["--disable-gpu", "--hide-scrollbars", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
      chromiumSandbox: opts.chromiumSandbox ?? process.getuid?.() !== 0,
      ...(opts.proxy ? { proxy: { server: opts.proxy, bypass: "127.0.0.1,localhost,[::1]" } } : {}),
      timeout: 60_000,
    });
  } catch (e) {
    throw new PageCaptureError(
      `Chromium (${opts.chromium}) did not start for the screenshot of ${target} (${firstLine(e)}); check that it runs with --headless, or name another with ATOMIC_CHROMIUM.`,
      target,
      { cause: e },
    );
  }
  try {
    const page = await browser.newPage({ viewport: { width, height } });
    let status: number | undefined;
    try {
      const response = await page.goto(url, { waitUntil: "load", timeout: opts.timeoutMs ?? 30_000 });
      status = response?.status();
    } catch (e) {
      throw new PageCaptureError(
        `the reference ${target} did not load (${firstLine(e)}); check the address (is the site up, the file there?) or leave it out.`,
        target,
        { cause: e },
      );
    }
    if (status !== undefined && status >= 400) {
      throw new PageCaptureError(`the reference ${target} did not load (HTTP ${status}); check the address or leave it out.`, target);
    }
    mkdirSync(opts.dir, { recursive: true });
    const full = join(opts.dir, `${opts.name}-full.png`);
    await page.screenshot({ path: full, fullPage: true });
    const pageHeight = await page.evaluate("Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0)") as number;
    const scroll: string[] = [];
    const count = Math.min(steps, Math.max(1, Math.ceil(pageHeight / height)));
    for (let i = 0; i < count; i++) {
      await page.evaluate(`window.scrollTo(0, ${i * height})`);
      const png = join(opts.dir, `${opts.name}-scroll-${String(i + 1).padStart(2, "0")}.png`);
      await page.screenshot({ path: png });
      scroll.push(png);
    }
    return { url, title: await page.title(), full, scroll, pageHeight };
  } finally {
    await browser.close();
  }
}

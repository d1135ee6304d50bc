/**
 * Shared pieces of the status page's Chromium tests: one headless Chromium
 * (Debian's /usr/bin/chromium through playwright-core) per test file,
 * `atomic serve` with its login URL, signing in through it, `atomic run`
 * of a fixture, and a page that collects script errors.
 */

import { expect } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { ROOT, lineWatcher, spawnAtomic } from "../helpers/atomic.ts";

export const CHROMIUM = "/usr/bin/chromium";
export const HAVE_CHROMIUM = existsSync(CHROMIUM);
export const ARTIFACTS = join(ROOT, "test-artifacts", "status");
export const FIXTURES = join(import.meta.dir, "fixtures");

let browser: Browser | undefined;

export async function launchBrowser(): Promise<void> {
  if (!HAVE_CHROMIUM) return;
  mkdirSync(ARTIFACTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    // playwright gives every launch a fresh, empty profile directory of its own
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
}

export async function closeBrowser(): Promise<void> {
  await browser?.close();
  browser = undefined;
}

/** `atomic serve`, with the login URL it printed and the page's clean address. */
export async function startServe(home: string, env?: Record<string, string>, args: string[] = [], cwd?: string) {
  const proc = spawnAtomic(["serve", "--port", "0", ...args], { home, ...(env ? { env } : {}), ...(cwd ? { cwd } : {}) });
  const out = lineWatcher(proc.stdout);
  const login = (await out.waitFor(/^status page: /)).slice("status page: ".length).trim();
  const url = login.replace(/\?token=[0-9a-f]+$/, "");
  expect(url).not.toBe(login);
  return { proc, url, login };
}

/** Enters through the printed login URL: the browser lands on the clean address, signed in by a cookie no script sees. */
export async function signIn(page: Page, login: string, url: string): Promise<void> {
  await page.goto(login);
  expect(page.url()).toBe(url);
  expect(await page.evaluate(() => (globalThis as unknown as { document: { cookie: string } }).document.cookie)).toBe("");
}

/** `atomic run` of a workflow file (a fixture name or a path), with its run id once it started. */
export async function startRun(home: string, workflow: string, inputs: string[], opts: { env?: Record<string, string>; cwd?: string } = {}) {
  const file = workflow.includes("/") ? workflow : join(FIXTURES, workflow);
  const proc = spawnAtomic(["run", file, ...inputs.flatMap((i) => ["--input", i])], { home, ...opts });
  const out = lineWatcher(proc.stdout);
  const id = /started run ([0-9a-z]{18})/.exec(await out.waitFor(/^started run /))![1]!;
  return { proc, id, out };
}

export async function newPage(width = 1280, height = 900): Promise<{ page: Page; errors: string[] }> {
  const page = await browser!.newPage({ viewport: { width, height } });
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  return { page, errors };
}

/** The end of a page test, whatever it did: the page closed, then the server stopped (Ctrl-C) and gone. */
export async function closePageAndServer(page: Page, server: { kill(signal: NodeJS.Signals): void; exited: Promise<number> }): Promise<void> {
  await page.close();
  server.kill("SIGINT");
  await server.exited;
}

/** Status of every stage node in the graph, by name. */
export function nodeStatuses(page: Page): Promise<Record<string, string>> {
  return page.$$eval("svg.graph g.node[data-status]", (els) =>
    Object.fromEntries(els.map((e) => [e.getAttribute("data-name") ?? "", e.getAttribute("data-status") ?? ""])),
  );
}

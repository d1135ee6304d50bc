/**
 * Shared pieces of the status page's Chromium tests: one headless Chromium
 * (Debian's /usr/bin/chromium through playwright-core) per `bun test`
 * process, `atomic serve` with its login URL, signing in through it,
 * `atomic run` of a fixture, and a page that collects script errors.
 *
 * bun runs a process's test files one after another with one module
 * registry, so the Chromium the first file launches serves the files after
 * it (launched again only if it went away): a launch costs about 3
 * CPU-seconds on this project's 2-core machine, once per file before, and
 * the suite has fourteen such files. A test's page is a browser context of
 * its own (`newPage`: no cookie or storage crosses from one test to the
 * next), or the file's kept page (`keptPage`, left wiped by each test), and
 * a file's `releaseBrowser` closes what it left open. bun test runs no exit handler (playwright-core's would kill the
 * browser and remove its profile), so each launch puts everything it
 * writes (playwright's profile and artifact folders, Chromium's own temp
 * files: TMPDIR during the launch) in one folder, and a watcher
 * (`watchOwner`) kills the browser's process group and removes that folder
 * once the process is gone. (Chromium also quits by itself when its
 * DevTools pipe closes, measured with the test process SIGKILLed.)
 */

import { expect } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { ROOT, lineWatcher, spawnAtomic } from "../helpers/atomic.ts";
import { watchOwner } from "../helpers/postgres.ts";
import { seedRun, type SeedOptions } from "../helpers/seed-runs.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { openJournal } from "../../src/journal/open.ts";

export const CHROMIUM = "/usr/bin/chromium";
export const HAVE_CHROMIUM = existsSync(CHROMIUM);
export const ARTIFACTS = join(ROOT, "test-artifacts", "status");
export const FIXTURES = join(import.meta.dir, "fixtures");

let browser: Browser | undefined;

/** The process's Chromium, launched on first use (and again if it went away). */
export async function launchBrowser(): Promise<void> {
  if (!HAVE_CHROMIUM) return;
  mkdirSync(ARTIFACTS, { recursive: true });
  if (browser?.isConnected()) return;
  const dir = mkdtempSync(join(tmpdir(), "atomic-chromium-"));
  const outer = process.env.TMPDIR;
  process.env.TMPDIR = dir;
  try {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      // playwright gives every launch a fresh, empty profile directory of its own
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
  } finally {
    if (outer === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = outer;
  }
  // The browser leads a process group of its own (playwright starts it detached); "0": none found, nothing to kill.
  watchOwner(process.pid, ["sh", "-c", '[ "$1" -gt 1 ] && kill -KILL -- "-$1" 2>/dev/null; sleep 1; rm -rf -- "$0"', dir, String(browserGroup(dir))]);
}

/** The process group of the Chromium whose profile is under `dir` (its main process leads it), or 0. */
function browserGroup(dir: string): number {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(`--user-data-dir=${dir}/`)) continue;
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const pgid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
      if (pgid === Number(entry)) return pgid;
    } catch {
      // gone meanwhile
    }
  }
  return 0;
}

/** The end of a test file: the pages it left open are closed (each with its context); the browser stays for the next file. */
export async function releaseBrowser(): Promise<void> {
  if (!browser?.isConnected()) return;
  await Promise.all(browser.contexts().map((c) => c.close()));
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

let kept: { page: Page; errors: string[] } | undefined;

/**
 * A page kept from one test of a file to the next (made on first use, and again after a file's
 * `releaseBrowser` or a test that left it broken), for files whose tests each start a server of
 * their own: a new page is a window of its own, about 2 CPU-seconds of Chromium's before it shows
 * anything (docs/design/testing.md), where a navigation of the kept one reuses its window and
 * renderer. Each test gets it at the viewport asked, with no script error carried over, and
 * `leavePageAndStopServer` leaves it with no cookie and no permission: what a test sees is what a
 * new page would show (the status page keeps nothing in the browser but its sign-in cookie).
 */
export async function keptPage(width = 1280, height = 900): Promise<{ page: Page; errors: string[] }> {
  if (!kept || kept.page.isClosed()) kept = await newPage(width, height);
  else await kept.page.setViewportSize({ width, height });
  kept.errors.length = 0;
  return kept;
}

/** The end of a test on the kept page, whatever it did: the page left for an empty one (its streams closed) and wiped, then the server stopped. */
export async function leavePageAndStopServer(page: Page, server: { kill(signal: NodeJS.Signals): void; exited: Promise<number> }): Promise<void> {
  try {
    await page.goto("about:blank");
    await page.context().clearCookies();
    await page.context().clearPermissions();
  } catch {
    await page.close(); // broken: the next test makes a new one
  }
  await stopServer(server);
}

async function stopServer(server: { kill(signal: NodeJS.Signals): void; exited: Promise<number> }): Promise<void> {
  server.kill("SIGINT");
  await server.exited;
}

/** The end of a page test, whatever it did: the page closed, then the server stopped (Ctrl-C) and gone. */
export async function closePageAndServer(page: Page, server: { kill(signal: NodeJS.Signals): void; exited: Promise<number> }): Promise<void> {
  await page.close();
  await stopServer(server);
}

/** Status of every stage node in the graph, by name. */
export function nodeStatuses(page: Page): Promise<Record<string, string>> {
  return page.$$eval("svg.graph g.node[data-status]", (els) =>
    Object.fromEntries(els.map((e) => [e.getAttribute("data-name") ?? "", e.getAttribute("data-status") ?? ""])),
  );
}

/** A new home whose journal holds the runs `seeds` describe, written straight into it (helpers/seed-runs.ts): their ids in order. */
export async function seededHome(seeds: SeedOptions[]): Promise<{ home: string; runIds: string[] }> {
  const home = makeTempDir();
  const journal = await openJournal({ home, durability: "normal" });
  try {
    const runIds: string[] = [];
    for (const seed of seeds) runIds.push(await seedRun(journal, { artifactsDir: join(home, "artifacts"), ...seed }));
    return { home, runIds };
  } finally {
    await journal.close();
  }
}

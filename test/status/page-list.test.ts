/**
 * The console's run list in headless Chromium against the real binary
 * (`atomic serve`, runs made by `atomic run`): the search runs in the
 * journal (GET /api/runs), not over the page already loaded:
 *
 * - text in inputs and outputs (any case), the workflow, a time range and
 *   tags, each kept in the address so a reload shows the same search;
 * - a time the server cannot read is said under the toolbar, with its hint;
 * - the pager says which page of how many;
 * - a run's start reads the same as in `atomic show` (UTC, the zone said).
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { FIXTURES, HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "./browser-support.ts";

declare const document: { querySelectorAll(s: string): Iterable<{ getAttribute(name: string): string | null }> };

beforeAll(launchBrowser);
afterAll(releaseBrowser);
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

/** Waits until the list shows these runs, in this order. */
async function rowsAre(page: Page, ids: string[]): Promise<void> {
  const shown = () => page.$$eval("tr[data-run]", (els) => els.map((e) => e.getAttribute("data-run") ?? "").join(" "));
  await page.waitForFunction((want) => [...document.querySelectorAll("tr[data-run]")].map((e) => e.getAttribute("data-run")).join(" ") === want, ids.join(" "), { timeout: 15_000 }).catch(async (err) => {
    throw new Error(`the list shows [${await shown()}], not [${ids.join(" ")}]: ${err}`);
  });
}

async function search(page: Page, field: string, text: string): Promise<void> {
  await page.fill(field, text);
  await page.press(field, "Enter");
}

describe.skipIf(!HAVE_CHROMIUM)("the run list's search in Chromium", () => {
  test("text, workflow, time range and tags searched by the server; a bad time said inline; the pager's page count", async () => {
    const home = makeTempDir();
    const other = join(makeTempDir(), "other.ts");
    writeFileSync(other, 'import { workflow } from "atomic";\nexport default workflow({ name: "other", run: async () => ({ verdict: "Ship It" }) });\n');
    const ran: string[] = [];
    for (const args of [[join(FIXTURES, "console.ts"), "--input", "topic=durability"], [join(FIXTURES, "console.ts"), "--input", "topic=caching", "--tag", "team=search"], [other]]) {
      const r = await runAtomic(["run", ...args], { home });
      expect(r.code).toBe(0);
      ran.push(/run ([0-9a-z]{18})/.exec(r.stderr + r.stdout)![1]!);
    }
    const [durable, caching, shipped] = ran as [string, string, string];
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await rowsAre(page, [shipped, caching, durable]);
      expect(await page.textContent("#page-info")).toBe("page 1 of 1");
      // A time reads the same on the page and in the CLI, its zone said.
      const shown = await runAtomic(["show", durable], { home });
      const cliStarted = /^\s*started\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC) \(/m.exec(shown.stdout)?.[1];
      expect(cliStarted).toBeDefined();
      expect(await page.textContent(`tr[data-run="${durable}"] td[data-label="started"]`)).toBe(cliStarted!);

      await search(page, "#run-search", "DURABILITY"); // an input, any case
      await rowsAre(page, [durable]);
      expect(page.url()).toBe(`${url}?q=DURABILITY`);
      await search(page, "#run-search", "ship it"); // an output
      await rowsAre(page, [shipped]);
      await search(page, "#run-search", "");
      await search(page, "#workflow-filter", "console");
      await rowsAre(page, [caching, durable]);
      await search(page, "#tag-filter", "team=search");
      await rowsAre(page, [caching]);
      expect(await page.textContent("#page-info")).toBe("page 1 of 1");

      await search(page, "#since-filter", "yesterday");
      await page.waitForSelector("#list-problem", { timeout: 15_000 });
      expect(await page.textContent("#list-problem")).toBe('since "yesterday" is neither a date nor an age (use an ISO date or time (2026-12-01, 2026-12-01T09:30Z) or an age like 90m, 2h, 7d)');
      await search(page, "#since-filter", "1h");
      await page.waitForSelector("#list-problem", { state: "detached", timeout: 15_000 });
      await rowsAre(page, [caching]);
      await search(page, "#until-filter", "2h"); // before since: refused
      await page.waitForSelector("#list-problem", { timeout: 15_000 });
      expect(await page.textContent("#list-problem")).toBe("until must be later than since (for example ?since=2026-12-01&until=2026-12-02)");
      await search(page, "#since-filter", "");
      await search(page, "#until-filter", "1h"); // runs started over an hour ago: none
      await page.waitForFunction(() => (globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }).document.querySelector("tbody td")?.textContent === "no run matches the filter", undefined, { timeout: 15_000 });
      expect(await page.textContent("#page-info")).toBe("page 1 of 1");

      // the address holds the search: a reload shows it again
      await page.goto(`${url}?q=caching&since=1h`);
      await rowsAre(page, [caching]);
      expect(await page.inputValue("#run-search")).toBe("caching");
      expect(await page.inputValue("#since-filter")).toBe("1h");
      // the two refused searches above, as Chromium logs them; nothing else
      expect(errors).toEqual(Array(2).fill("Failed to load resource: the server responded with a status of 400 (Bad Request)"));
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);

  test("the origin filter: the list shows the runs of the origin picked, and the address keeps it", async () => {
    const home = makeTempDir();
    const first = await runAtomic(["run", join(FIXTURES, "console.ts"), "--input", "topic=origin"], { home });
    expect(first.code).toBe(0);
    const started = /run ([0-9a-z]{18})/.exec(first.stderr + first.stdout)![1]!;
    const rerun = await runAtomic(["rerun", started], { home });
    expect(rerun.code).toBe(0);
    const again = /atomic show (\S+)/.exec(rerun.stdout)![1]!;
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await rowsAre(page, [again, started]);
      await page.selectOption("#origin-filter", "rerun");
      await rowsAre(page, [again]);
      expect(page.url()).toBe(`${url}?origin=rerun`);
      await page.selectOption("#origin-filter", "cli");
      await rowsAre(page, [started]);
      await page.goto(`${url}?origin=rerun`);
      await rowsAre(page, [again]);
      expect(await page.inputValue("#origin-filter")).toBe("rerun");
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);
});

/**
 * The status page in headless Chromium: the run list shows the schedules
 * (read-only: name, cron and zone, state, next tick, last run), and a run
 * with a caller-chosen id (`run --id`) opens on its own page.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { ARTIFACTS, HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "../status/browser-support.ts";
import { COUNT } from "./sched-support.ts";

declare const document: { querySelector(selector: string): { textContent: string | null; hidden?: boolean } | null; body: { dataset: Record<string, string | undefined> } };

beforeAll(launchBrowser);
afterAll(releaseBrowser);
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

describe.skipIf(!HAVE_CHROMIUM)("schedules on the status page", () => {
  test("the run list shows each schedule; a keyed run opens on its page", async () => {
    const dir = makeTempDir();
    const home = join(dir, "home");
    const log = join(dir, "effects.log");
    const opts = { home, cwd: dir };
    expect((await runAtomic(["schedule", "add", "weekdays", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin", COUNT, "--input", `log=${log}`], opts)).code).toBe(0);
    expect((await runAtomic(["schedule", "add", "later", "--cron", "0 0 1 1 *", COUNT, "--input", `log=${log}`], opts)).code).toBe(0);
    expect((await runAtomic(["schedule", "pause", "later"], opts)).code).toBe(0);
    expect((await runAtomic(["run", COUNT, "--id", "report-2026-12-01", "--input", `log=${log}`], opts)).code).toBe(0);
    // No tick falls due while the test runs: the page only reads the schedules.
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await page.waitForSelector('#schedules tr[data-schedule="weekdays"]');
      const row = (name: string) => page.locator(`#schedules tr[data-schedule="${name}"] td`).allTextContents();
      const weekdays = await row("weekdays");
      expect(weekdays.slice(0, 4)).toEqual(["weekdays", "0 9 * * 1-5 (Europe/Berlin)", COUNT, "active"]);
      expect(weekdays[4]).not.toBe("");
      const later = await row("later");
      expect(later.slice(0, 5)).toEqual(["later", "0 0 1 1 * (UTC)", COUNT, "paused", ""]);
      await page.screenshot({ path: join(ARTIFACTS, "schedules.png"), fullPage: true });
      await page.click('a[href="/runs/report-2026-12-01"]');
      await page.waitForFunction(() => document.body.dataset.runStatus === "completed", undefined, { timeout: 30_000 });
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 90_000);
});

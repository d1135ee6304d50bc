/**
 * The console on a home its server may only read (issue 29): a read-only
 * bind mount of a home with a failed and a completed run, served by the
 * real binary, driven in headless Chromium. Start, Resume, Rerun, Fork
 * and bulk Cancel each show the one sentence saying the home is
 * read-only, with its hint; the page keeps working (no script error, the
 * run still shown) and nothing is written. (A viewer without write rights,
 * a second Unix user, gets the same refusals through the JSON API:
 * test/e2e/read-only-home.test.ts.)
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { killSpawned } from "../helpers/atomic.ts";
import { CAN_MOUNT, bindReadOnly, unmountAll } from "../helpers/mounts.ts";
import { removeTempDirs } from "../helpers/temp.ts";
import { HAVE_CHROMIUM, closePageAndServer, launchBrowser, newPage, releaseBrowser, seededHome, signIn, startServe } from "./browser-support.ts";

declare const document: { querySelector(s: string): { textContent: string | null } | null };

beforeAll(launchBrowser);
afterAll(async () => {
  await releaseBrowser();
  unmountAll();
});
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

const SENTENCE = /^cannot write the journal at .*: the atomic home .* is read-only for this user, and this command changes runs\nhint: reading commands \(runs, show, logs, serve\) work on it as it is;/;

/** Waits until `selector`'s text is the read-only sentence with its hint. */
async function saysReadOnly(page: import("playwright-core").Page, selector: string): Promise<void> {
  await page.waitForFunction((s) => /is read-only for this user/.test(document.querySelector(s)?.textContent ?? ""), selector, { timeout: 30_000 });
  expect(await page.textContent(selector)).toMatch(SENTENCE);
}

describe.skipIf(!HAVE_CHROMIUM || !CAN_MOUNT)("the console on a read-only home", () => {
  test("start, resume, rerun, fork and bulk cancel each say the home is read-only; the page goes on", async () => {
    const { home: source, runIds } = await seededHome([{ stages: 2, status: "failed" }, { stages: 2 }]);
    const [failed, completed] = runIds as [string, string];
    const m = bindReadOnly(source);
    const before = readdirSync(m.dir).sort();
    const { proc: server, url, login } = await startServe(m.dir);
    const { page, errors } = await newPage();
    page.on("dialog", (d) => void d.accept());
    try {
      await signIn(page, login, url);

      // bulk Cancel from the list
      await page.waitForSelector(`input.pick[data-run="${failed}"]`, { timeout: 30_000 });
      await page.check(`input.pick[data-run="${failed}"]`);
      await page.click("#bulk-cancel");
      await page.waitForFunction(() => /^cancelled 0 of 1/.test(document.querySelector("#bulk-result")?.textContent ?? ""), undefined, { timeout: 30_000 });
      expect(await page.textContent("#bulk-result")).toMatch(new RegExp(`^cancelled 0 of 1\\n${failed}: cannot write the journal at .*: the atomic home .* is read-only for this user, and this command changes runs$`));

      // Start from the form
      await page.click("#btn-start");
      await page.waitForSelector('#start-workflow option[value="goal"]', { state: "attached", timeout: 15_000 });
      await page.selectOption("#start-workflow", "goal");
      await page.click("#start-go");
      await page.waitForSelector("#start-result:not([hidden])", { timeout: 15_000 });
      await saysReadOnly(page, "#start-result");

      // Resume and Rerun of the failed run
      await page.goto(`${url}runs/${failed}`);
      await page.waitForSelector("#btn-resume:not([hidden])", { timeout: 30_000 });
      await page.click("#btn-resume");
      await saysReadOnly(page, "#run-action-result");
      await page.$eval("#run-action-result", (el) => {
        el.textContent = "";
      });
      await page.click("#btn-rerun");
      await page.click("#rerun-go");
      await saysReadOnly(page, "#run-action-result");

      // Fork of the completed run at a step picked on the timeline
      await page.goto(`${url}runs/${completed}`);
      await page.click('#timeline .row[data-name="stage-1"]');
      await page.waitForSelector("#btn-fork", { timeout: 15_000 });
      await page.click("#btn-fork");
      await saysReadOnly(page, "#fork-result");

      // the page still works: the run is shown, nothing broke, nothing was written
      await page.goto(`${url}runs/${completed}`);
      await page.waitForSelector('svg.graph g.node[data-name="stage-1"]', { timeout: 30_000 });
      // Chromium logs each refused request (start, resume, rerun, fork: 403) to the console; no script error
      expect(errors).toEqual(Array(4).fill("Failed to load resource: the server responded with a status of 403 (Forbidden)"));
      expect(readdirSync(m.dir).sort()).toEqual(before);
    } finally {
      await closePageAndServer(page, server);
      m.cleanup();
    }
  }, 180_000);
});

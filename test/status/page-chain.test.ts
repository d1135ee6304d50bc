/**
 * The run page follows a chain of runs (ctx.continueAsNew, issue 26): each
 * run's page links the run it continues and the run that continued it, so
 * the chain can be walked both ways; the list shows the ended runs of the
 * chain as `continued`; the page shows the short version of the code the
 * run is pinned to. Headless Chromium against the real binary.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "./browser-support.ts";

beforeAll(launchBrowser);
afterAll(releaseBrowser);
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

const CONTINUES = join(import.meta.dir, "..", "e2e", "fixtures", "continues.ts");

describe.skipIf(!HAVE_CHROMIUM)("a chain of runs on the status page", () => {
  test("each run's page links the run it continues and the run that continued it; a click walks the chain", async () => {
    const home = makeTempDir();
    const r = await runAtomic(["--json", "run", CONTINUES, "--input", "total=6", "--input", "every=2"], { home });
    expect(r.code).toBe(0);
    const listed = await runAtomic(["--json", "runs", "--workflow", "continues"], { home });
    const runs = listed.stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; workflowDigest: string });
    const [third, second, first] = runs.map((r) => r.id);
    expect(first && second && third).toBeTruthy();
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await page.waitForSelector(`a[href="/runs/${first}"]`);
      expect(await page.locator(".badge.s-continued").count()).toBe(2);

      await page.goto(`${url}runs/${second}`);
      await page.waitForSelector("#run-continued-as");
      expect(await page.textContent("#run-continues")).toBe(`continues ${first}`);
      expect(await page.getAttribute("#run-continues a", "href")).toBe(`/runs/${first}`);
      expect(await page.textContent("#run-continued-as")).toBe(`continued as ${third}`);
      // The short version of the code the run is pinned to (atomic show RUN --code prints it).
      expect(await page.textContent("#run-code")).toBe(`code ${runs[1]!.workflowDigest.slice(0, 10)}`);

      // Forward to the chain's last run: it names the run it continues and nothing after it.
      await page.click("#run-continued-as a");
      await page.waitForURL(`${url}runs/${third}`);
      await page.waitForSelector("#run-continues");
      expect(await page.textContent("#run-continues")).toBe(`continues ${second}`);
      expect(await page.$("#run-continued-as")).toBeNull();

      // Back, through the link, to the first: it continues nothing.
      await page.click("#run-continues a");
      await page.waitForURL(`${url}runs/${second}`);
      await page.waitForSelector("#run-continues");
      await page.click("#run-continues a");
      await page.waitForURL(`${url}runs/${first}`);
      await page.waitForSelector("#run-continued-as");
      expect(await page.textContent("#run-continued-as")).toBe(`continued as ${second}`);
      expect(await page.$("#run-continues")).toBeNull();
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);
});

/**
 * The status page shows which runs the local service recovered (headless
 * Chromium against the real binary): the run list tags the run
 * "recovered", its page says how often the service resumed it.
 */

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "../status/browser-support.ts";
import { kill9, newSetup, runIdOf, serviceCleanup, startRun, untilStatus } from "./support.ts";

serviceCleanup();
beforeAll(launchBrowser);
afterAll(releaseBrowser);

describe.skipIf(!HAVE_CHROMIUM)("the page and the service", () => {
  test("a run the service recovered is tagged in the run list and says so on its page", async () => {
    const s = newSetup();
    const { proc: server, url, login } = await startServe(s.home);
    const run = startRun(s, "gate");
    const runId = await runIdOf(run.out);
    await run.out.waitFor(/at the gate/);
    await kill9(run.proc);
    writeFileSync(s.gateFile, "open");
    await untilStatus(s, runId, "completed");
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await page.waitForSelector(`tr[data-run="${runId}"] .recovered`);
      expect((await page.textContent(`tr[data-run="${runId}"] .recovered`))?.trim()).toBe("recovered");
      await page.goto(`${url}runs/${runId}`);
      await page.waitForSelector("#run-recovered");
      expect(await page.textContent("#run-recovered")).toBe("recovered by the service once");
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);
});

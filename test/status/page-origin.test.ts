/**
 * The run page says where a run came from (issue 17): a fork's page names
 * the run it forks, linked, and the step it went live at; a rerun's the run
 * it reruns. Headless Chromium against the real binary.
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

const EFFECTS = join(import.meta.dir, "..", "e2e", "fixtures", "effects.ts");
const idOf = (stdout: string) => /atomic show (\S+)/.exec(stdout)![1]!;

describe.skipIf(!HAVE_CHROMIUM)("run origin on the status page", () => {
  test("a fork's page names the run it forks (linked) and its step; a rerun's the run it reruns", async () => {
    const home = makeTempDir();
    const out = join(makeTempDir(), "effects.txt");
    const first = await runAtomic(["run", EFFECTS, "--input", `out=${out}`], { home });
    expect(first.code).toBe(0);
    const id = idOf(first.stdout);
    const fork = await runAtomic(["fork", id, "--at", "three"], { home });
    expect(fork.code).toBe(0);
    const rerun = await runAtomic(["rerun", id], { home });
    expect(rerun.code).toBe(0);
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${idOf(fork.stdout)}`);
      await page.waitForSelector("#run-origin");
      expect(await page.textContent("#run-origin")).toBe(`fork of ${id} at #2 (three)`);
      expect(await page.getAttribute("#run-origin a", "href")).toBe(`/runs/${id}`);
      await page.goto(`${url}runs/${idOf(rerun.stdout)}`);
      await page.waitForSelector("#run-origin");
      expect(await page.textContent("#run-origin")).toBe(`rerun of ${id}`);
      await page.goto(`${url}runs/${id}`);
      await page.waitForSelector("#run-duration");
      expect(await page.$("#run-origin")).toBeNull();
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
    }
  }, 120_000);
});

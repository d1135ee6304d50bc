/**
 * The console's starting actions (issue 29), in headless Chromium against
 * the real binary (`atomic serve`, the service driving what it starts):
 *
 * - a run started from the form of a registered workflow, its fields made
 *   from the input schema; a refused start (a required input left empty)
 *   shows the server's sentence inline; the run completes with the inputs
 *   typed;
 * - Rerun with an edited input, then Fork from a step picked on the timeline:
 *   each a new run that names the run it came from; none of them labelled
 *   "recovered" (the service drove them from their start);
 * - bulk Cancel of three selected runs after a confirmation naming the
 *   count, and bulk Resume of cancelled runs refused run by run with the
 *   CLI's sentence;
 * - the tag filter of the run list (runs tagged with `atomic run --tag`
 *   and ctx.tag);
 * - Resume of a crashed run (its driver killed) from its page, driven by a
 *   detached atomic resume (a service without recovery; its output named),
 *   and of a failed run with the service recovering: left to the service.
 *
 * At each step of these flows (the form with its refusal, the rerun
 * editor, the picked step with its Fork button, the forked run, the tag
 * filter, the bulk results, the crashed run's Resume) the page fits a
 * laptop's 1400x900 and a phone's 390x844 (layout-check.ts).
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, processesWithHome, runAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { FIXTURES, HAVE_CHROMIUM, releaseBrowser, leavePageAndStopServer, launchBrowser, keptPage, signIn, startRun, startServe } from "./browser-support.ts";
import { checkLayout } from "./layout-check.ts";

declare const document: { body: { dataset: Record<string, string | undefined> }; querySelector(s: string): { textContent: string } | null };

beforeAll(launchBrowser);
afterAll(releaseBrowser);
const homes: string[] = [];
afterEach(async () => {
  await killSpawned();
  // What the service and the page started runs detached: every one of them ended with its run.
  for (const home of homes.splice(0)) await waitUntil(() => processesWithHome(home).length === 0, 30_000, "the runs' processes to end");
  removeTempDirs();
});

const runStatusIs = (status: string) => (s: string) => document.body.dataset.runStatus === s;
const runIdOf = (url: string) => /\/runs\/([0-9a-z._-]+)$/.exec(url)![1]!;

function project(): string {
  const cwd = makeTempDir();
  mkdirSync(join(cwd, ".atomic", "workflows"), { recursive: true });
  copyFileSync(join(FIXTURES, "console.ts"), join(cwd, ".atomic", "workflows", "console.ts"));
  return cwd;
}

interface Detail {
  run: { status: string; inputs: Record<string, unknown>; outputs: Record<string, unknown>; origin?: { kind: string; runId: string; at?: { name: string } } };
}

describe.skipIf(!HAVE_CHROMIUM)("the console's actions in Chromium", () => {
  test("start from the form (a refusal inline), rerun with an edited input, fork from a step on the timeline; each fits both screens", async () => {
    const home = makeTempDir();
    homes.push(home);
    const { proc: server, url, login } = await startServe(home, undefined, [], project());
    const { page, errors } = await keptPage();
    const detail = (id: string) => page.evaluate(async (runId) => (await fetch(`/api/runs/${runId}`)).json(), id) as Promise<Detail>;
    try {
      await signIn(page, login, url);
      await page.click("#btn-start");
      await page.waitForSelector('#start-workflow option[value="console"]', { state: "attached", timeout: 15_000 });
      await page.selectOption("#start-workflow", "console");
      // the fields come from the input schema: a choice is a select with its options
      await page.waitForSelector("#start-input-topic", { timeout: 5_000 });
      expect(await page.$$eval("#start-input-mode option", (os) => os.map((o) => (o as unknown as { value: string }).value))).toEqual(["", "fast", "slow"]);
      await page.click("#start-go");
      await page.waitForSelector("#start-result:not([hidden])", { timeout: 15_000 });
      expect(await page.textContent("#start-result")).toBe('input "topic" is required\nhint: pass it with --input topic=VALUE');
      await checkLayout(page, "start-form");
      await page.fill("#start-input-topic", "durability");
      await page.fill("#start-input-count", "3");
      await page.selectOption("#start-input-mode", "slow");
      await Promise.all([page.waitForURL(/\/runs\/[0-9a-z]+$/, { timeout: 30_000 }), page.click("#start-go")]);
      const first = runIdOf(page.url());
      await page.waitForFunction(runStatusIs("completed"), "completed", { timeout: 60_000 });
      expect(await page.textContent("#run-tags")).toBe("topic=durability");
      expect((await detail(first)).run.outputs).toEqual({ topic: "durability", count: 3, mode: "slow", said: "first durability / second 3" });

      // Rerun with one input changed
      await page.click("#btn-rerun");
      const inputs = JSON.parse(await page.inputValue("#rerun-inputs")) as Record<string, unknown>;
      expect(inputs).toEqual({ topic: "durability", count: 3, mode: "slow" });
      await page.fill("#rerun-inputs", JSON.stringify({ ...inputs, topic: "speed" }));
      await checkLayout(page, "rerun");
      await Promise.all([page.waitForURL((u) => /\/runs\/[0-9a-z]+$/.test(u.pathname) && !u.pathname.endsWith(first), { timeout: 30_000 }), page.click("#rerun-go")]);
      const rerun = runIdOf(page.url());
      await page.waitForFunction(runStatusIs("completed"), "completed", { timeout: 60_000 });
      const rerunDetail = await detail(rerun);
      expect(rerunDetail.run.outputs.said).toBe("first speed / second 3");
      expect(rerunDetail.run.origin).toMatchObject({ kind: "rerun", runId: first });

      // Fork at the step picked on the timeline (the graph's nodes pick the same way: page-layout.test.ts)
      await page.click('#timeline .row[data-name="second"]');
      await page.waitForFunction(() => document.querySelector("#stage-name")?.textContent === "second", undefined, { timeout: 15_000 });
      await page.waitForSelector("#btn-fork", { timeout: 15_000 });
      await checkLayout(page, "fork-step");
      page.once("dialog", (d) => void d.accept());
      await Promise.all([page.waitForURL((u) => /\/runs\/[0-9a-z]+$/.test(u.pathname) && !u.pathname.endsWith(rerun), { timeout: 30_000 }), page.click("#btn-fork")]);
      const fork = runIdOf(page.url());
      await page.waitForFunction(runStatusIs("completed"), "completed", { timeout: 60_000 });
      const forkDetail = await detail(fork);
      expect(forkDetail.run.origin).toMatchObject({ kind: "fork", runId: rerun, at: { name: "second" } });
      expect(forkDetail.run.outputs.said).toBe("first speed / second 3");
      await page.waitForSelector("#run-origin", { timeout: 5_000 });
      await checkLayout(page, "forked-run");
      // Runs the service started (left to it) are not labelled recovered, on their pages nor in the list.
      expect(await page.$("#run-recovered")).toBeNull();
      const list = (await page.evaluate(async () => (await fetch("/api/runs")).json())) as { runs: { id: string; recovered?: number }[] };
      expect(list.runs.filter((r) => [first, rerun, fork].includes(r.id)).map((r) => r.recovered)).toEqual([undefined, undefined, undefined]);
      // The one refused start is the browser's only complaint.
      expect(errors).toEqual(["Failed to load resource: the server responded with a status of 400 (Bad Request)"]);
    } finally {
      await leavePageAndStopServer(page, server);
    }
  }, 180_000);

  test("bulk cancel of three selected runs; bulk resume of cancelled runs is refused run by run; Resume of a crashed run", async () => {
    const home = makeTempDir();
    homes.push(home);
    const gate = join(makeTempDir(), "gate");
    // Without recovery: the crashed run below waits for the page's Resume rather than the service's.
    const { proc: server, url, login } = await startServe(home, undefined, ["--no-recover"]);
    const { page, errors } = await keptPage();
    try {
      const runs = [];
      for (let i = 0; i < 3; i++) runs.push(await startRun(home, "interact.ts", ["skip=true", `gate=${gate}`]));
      const tagged = await runAtomic(["run", join(FIXTURES, "console.ts"), "--input", "topic=tags", "--tag", "team=search"], { home });
      expect(tagged.code).toBe(0);
      await signIn(page, login, url);
      // the tag filter asks the server for runs with every tag typed
      await page.fill("#tag-filter", "team=search topic=tags");
      await page.press("#tag-filter", "Enter");
      await page.waitForFunction(() => (globalThis as unknown as { document: { querySelectorAll(s: string): { length: number } } }).document.querySelectorAll("tr[data-run]").length === 1, undefined, { timeout: 15_000 });
      expect(await page.$$eval("tr[data-run] .tag", (els) => els.map((e) => e.textContent))).toEqual(["team=search", "topic=tags"]);
      expect(page.url()).toBe(`${url}?tag=team%3Dsearch+topic%3Dtags`);
      await checkLayout(page, "tag-filter");
      await page.fill("#tag-filter", "");
      await page.press("#tag-filter", "Enter");
      await page.waitForSelector(`tr[data-run="${runs[2]!.id}"]`, { timeout: 15_000 });
      await page.click("#bulk-cancel");
      expect(await page.textContent("#bulk-result")).toBe("select runs first");
      for (const r of runs) await page.check(`input.pick[data-run="${r.id}"]`);
      let asked = "";
      page.once("dialog", (d) => { asked = d.message(); void d.accept(); });
      await page.click("#bulk-cancel");
      await page.waitForFunction(() => /^cancelled 3 of 3/.test((globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }).document.querySelector("#bulk-result")?.textContent ?? ""), undefined, { timeout: 30_000 });
      expect(asked).toBe("Cancel 3 runs?");
      for (const r of runs) await r.proc.exited;

      for (const r of runs.slice(0, 2)) await page.check(`input.pick[data-run="${r.id}"]`);
      page.once("dialog", (d) => void d.accept());
      await page.click("#bulk-resume");
      await page.waitForFunction(() => /^resumed 0 of 2/.test((globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }).document.querySelector("#bulk-result")?.textContent ?? ""), undefined, { timeout: 30_000 });
      expect(await page.textContent("#bulk-result")).toContain(`${runs[0]!.id}: run ${runs[0]!.id} was cancelled and cannot be resumed`);
      await checkLayout(page, "bulk-result");

      // Resume from the run's page: a run whose driver was killed
      const crashed = await startRun(home, "interact.ts", ["skip=true", `gate=${gate}`]);
      await crashed.out.waitFor(/^\s+\S+ wait started/, 90_000);
      crashed.proc.kill("SIGKILL");
      await crashed.proc.exited;
      await page.goto(`${url}runs/${crashed.id}`);
      await page.waitForFunction(runStatusIs("crashed"), "crashed", { timeout: 60_000 });
      await checkLayout(page, "resume");
      await page.click("#btn-resume");
      await page.waitForFunction(runStatusIs("running"), "running", { timeout: 30_000 });
      // A service without recovery does not take the run: a detached atomic resume drives it, its output named.
      await page.waitForFunction(() => /^resumed by a detached atomic resume; its output: \/.+$/.test(document.querySelector("#run-action-result")?.textContent ?? ""), undefined, { timeout: 30_000 });
      expect(await page.isVisible("#btn-resume")).toBe(false);
      writeFileSync(gate, "");
      await page.waitForFunction(runStatusIs("completed"), "completed", { timeout: 60_000 });
      expect(errors).toEqual([]);
    } finally {
      writeFileSync(gate, "");
      await leavePageAndStopServer(page, server);
    }
  }, 180_000);
  test("Resume of a failed run with the service recovering: left to the service, which drives it to its end", async () => {
    const home = makeTempDir();
    homes.push(home);
    const dir = makeTempDir();
    const gate = join(dir, "ready");
    const file = join(dir, "flaky.ts");
    writeFileSync(file, `import { workflow } from "atomic";\nexport default workflow({ name: "flaky", run: async (ctx) => ({ ok: (await ctx.shell("check", "test -f '${gate}' && echo ready")).text.trim() }) });\n`);
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await keptPage();
    try {
      const failed = await startRun(home, file, []);
      expect(await failed.proc.exited).not.toBe(0);
      writeFileSync(gate, "");
      await signIn(page, login, url);
      await page.goto(`${url}runs/${failed.id}`);
      await page.waitForFunction(runStatusIs("failed"), "failed", { timeout: 30_000 });
      await page.click("#btn-resume");
      await page.waitForFunction(() => document.querySelector("#run-action-result")?.textContent === "resumed: left to the service, which drives it on (and resumes it again should it stop)", undefined, { timeout: 30_000 });
      await page.waitForFunction(runStatusIs("completed"), "completed", { timeout: 60_000 });
      expect(errors).toEqual([]);
    } finally {
      await leavePageAndStopServer(page, server);
    }
  }, 180_000);
});

/**
 * How the status page draws a run (issue 13, item 20), in headless
 * Chromium against the real binary:
 *
 * - stage counts are of the stages that started ("29 done, 1 failed,
 *   1 running"), never a total the workflow has not reached;
 * - a fan-out of 30 shards is one box with its counts, opened and closed
 *   by a click, and stays open across live updates;
 * - hosts (the run's driver, a stage's) read as their names, the recorded
 *   identity on hover;
 * - the timeline shows the time a stage waited for admission apart from
 *   the time it ran, and a bar for each attempt;
 * - an agent stage's transcript is a conversation: the user's prompt, the
 *   assistant's turns with their tokens and cost, tool calls collapsed;
 * - a run that ended through ctx.exit skipped or blocked shows its status
 *   and its reason as a notice, and the runs list filters by it;
 * - a stage's panel lists its messages with their delivery states, and
 *   flags an agent stage whose output is empty (so do show, the run's
 *   output and the attempt's transcript).
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { inOrder, startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { ARTIFACTS, HAVE_CHROMIUM, releaseBrowser, leavePageAndStopServer, launchBrowser, keptPage, signIn, startRun, startServe } from "./browser-support.ts";

declare const document: {
  body: { dataset: Record<string, string | undefined> };
  querySelector(selector: string): { textContent: string | null; getAttribute(name: string): string | null } | null;
  querySelectorAll(selector: string): { length: number };
};

beforeAll(launchBrowser);
afterAll(releaseBrowser);
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

const completed = () => document.body.dataset.runStatus === "completed";

describe.skipIf(!HAVE_CHROMIUM)("status page views in Chromium", () => {
  test("stage counts show what started, without a total; a fan-out is one box with its counts, expandable", async () => {
    const home = makeTempDir();
    const gate = join(makeTempDir(), "gate");
    const { proc: server, url, login } = await startServe(home);
    const run = await startRun(home, "fanout.ts", [`gate=${gate}`]);
    const { page, errors } = await keptPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      const fan = page.locator('svg.graph g.fanout[data-label="shard-* 30"]');
      await page.waitForFunction(() => document.querySelector('svg.graph g.fanout[data-label="shard-* 30"]')?.getAttribute("data-counts") === "28 done, 1 failed, 1 running", undefined, { timeout: 60_000 });
      expect(await fan.locator("text.sub").textContent()).toBe("28 done, 1 failed, 1 running");
      // the shards are not drawn one by one, and the stage after them has not started: no total counts it
      expect(await page.$$('svg.graph g.node[data-name^="shard-"]')).toHaveLength(0);
      expect(await page.textContent("#t-stages b")).toBe("29 done, 1 failed, 1 running");
      expect(await page.textContent("#t-stages span")).toBe("stages so far");
      await page.screenshot({ path: join(ARTIFACTS, "fanout-closed.png"), fullPage: true });

      // opened: every shard, in a frame whose header closes it
      await fan.click();
      await page.waitForFunction(() => document.querySelectorAll('svg.graph g.node[data-name^="shard-"]').length === 30);
      expect(await page.getAttribute('svg.graph g.node[data-name="shard-0"]', "data-status")).toBe("failed");
      expect(await page.getAttribute('svg.graph g.node[data-name="shard-1"]', "data-status")).toBe("running");
      expect(await page.textContent("svg.graph g.fanout.open .fan-head")).toContain("shard-* 30: 28 done, 1 failed, 1 running");
      await page.screenshot({ path: join(ARTIFACTS, "fanout-open.png"), fullPage: true });

      // the run goes on: the fan-out stays open through the live updates
      writeFileSync(gate, "");
      await page.waitForFunction(completed, undefined, { timeout: 60_000 });
      expect(await run.proc.exited).toBe(0);
      expect(await page.$$('svg.graph g.node[data-name^="shard-"]')).toHaveLength(30);
      expect(await page.textContent("#t-stages b")).toBe("31 done, 1 failed");
      expect(await page.textContent("#t-stages span")).toBe("stages");
      await page.click("svg.graph g.fanout.open .fan-head");
      await page.waitForFunction(() => document.querySelectorAll('svg.graph g.node[data-name^="shard-"]').length === 0);
      expect(await fan.getAttribute("data-counts")).toBe("29 done, 1 failed");

      // the run list says the same, without a total
      await page.goto(url);
      const row = page.locator(`tr[data-run="${run.id}"]`);
      await row.waitFor();
      expect(await row.locator('td[data-label="stages"]').textContent()).toBe("31 done, 1 failed");
      expect(errors).toEqual([]);
    } finally {
      writeFileSync(gate, "");
      await leavePageAndStopServer(page, server);
    }
  }, 150_000);

  test("hosts read as names with the full identity on hover: the run's driver and a stage's host, as in show", async () => {
    const home = makeTempDir();
    const gate = join(makeTempDir(), "gate");
    const { proc: server, url, login } = await startServe(home);
    const run = await startRun(home, "fanout.ts", [`gate=${gate}`, "n=3"]);
    const { page, errors } = await keptPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      // shard-1 waits for the gate: the run is driven (it has a holder) while the page is looked at
      await page.waitForFunction(() => document.querySelector('svg.graph g.node[data-name="shard-1"]')?.getAttribute("data-status") === "running", undefined, { timeout: 60_000 });
      const shown = JSON.parse((await runAtomic(["show", run.id, "--json"], { home })).stdout) as { holder: { host: string; pid: number }; steps: { name: string; ranOn?: { host: string } }[] };
      // the recorded host is an identity (hostname/machine/boot/pid namespace): only its name is for reading
      expect(shown.holder.host.startsWith(`${hostname()}/`)).toBe(true);
      await page.waitForSelector("#run-holder");
      expect(await page.textContent("#run-holder")).toBe(`driven by pid ${shown.holder.pid} on ${hostname()}`);
      expect(await page.getAttribute("#run-holder .host", "title")).toBe(`host ${shown.holder.host}`);
      expect((await runAtomic(["show", run.id], { home })).stdout).toContain(`pid ${shown.holder.pid} on ${hostname()}`);
      // a stage's host: the same name, the identity on hover
      await page.click('svg.graph g.node[data-name="prepare"]');
      await page.waitForSelector("#stage-host");
      expect(await page.textContent("#stage-host")).toBe(`${hostname()} (the root's machine)`);
      expect(await page.getAttribute("#stage-host .host", "title")).toBe(`host ${shown.steps.find((x) => x.name === "prepare")!.ranOn!.host}`);
      expect(errors).toEqual([]);
    } finally {
      writeFileSync(gate, "");
      await leavePageAndStopServer(page, server);
    }
  }, 120_000);

  test("the timeline shows queued time apart from running time, and each attempt", async () => {
    const home = makeTempDir();
    // every start is paced (free memory "below" a huge minimum): each stage but the first waits its turn
    writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { minFreeMemoryMb: 1e12, paceMs: 600 } }));
    const marker = join(makeTempDir(), "marker");
    const { proc: server, url, login } = await startServe(home);
    const run = await startRun(home, "queued.ts", [`marker=${marker}`]);
    const { page, errors } = await keptPage();
    try {
      expect(await run.proc.exited).toBe(0);
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      await page.waitForFunction(completed, undefined, { timeout: 30_000 });
      const bars = (name: string) =>
        page.$$eval(`.gantt .row[data-name="${name}"] .bar`, (els) => els.map((e) => `${e.getAttribute("data-attempt")}:${e.getAttribute("data-state")}`));
      // a and b start together: one of them waited for the other's paced start (both may show the
      // moment they waited for a worker of the pool too: pooled attempts are queued until a worker starts them)
      const ab = [...(await bars("a")), ...(await bars("b"))].sort();
      expect(ab.filter((x) => x === "1:completed")).toHaveLength(2);
      expect(ab.filter((x) => x === "1:queued").length).toBeGreaterThanOrEqual(1);
      // flaky: two attempts, the second queued behind the pacing too, each its own bar
      expect(await bars("flaky")).toEqual(["1:queued", "1:failed", "2:queued", "2:completed"]);
      const title = await page.getAttribute('.gantt .row[data-name="flaky"] .bar.queued', "title");
      expect(title).toMatch(/^flaky attempt 1: queued \(waiting for admission or a worker\) /);
      // the stage panel lists the attempts with their queued and running time
      await page.click('.gantt .row[data-name="flaky"]');
      await page.waitForSelector('.panel .attempt[data-attempt="2"]');
      expect(await page.textContent('.panel .attempt[data-attempt="1"]')).toMatch(/^failed: queued \S+, ran \S+$/);
      expect(await page.textContent('.panel .attempt[data-attempt="2"]')).toMatch(/^completed: queued \S+, ran \S+$/);
      await page.screenshot({ path: join(ARTIFACTS, "timeline-queued.png"), fullPage: true });
      expect(errors).toEqual([]);
    } finally {
      await leavePageAndStopServer(page, server);
    }
  }, 120_000);

  test("ctx.exit skipped and blocked: their badges, the reason as a notice, the status filter and the API", async () => {
    const home = makeTempDir();
    const exitAs = join(import.meta.dir, "..", "e2e", "fixtures", "exit-as.ts");
    const skipped = await startRun(home, exitAs, ["status=skipped", "reason=nothing changed upstream"]);
    expect(await skipped.proc.exited).toBe(5);
    const blocked = await startRun(home, exitAs, ["status=blocked", "reason=waiting for the vendor"]);
    expect(await blocked.proc.exited).toBe(3);
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await keptPage();
    try {
      await signIn(page, login, url);
      for (const [run, status, reason] of [[skipped, "skipped", "nothing changed upstream"], [blocked, "blocked", "waiting for the vendor"]] as const) {
        await page.goto(`${url}runs/${run.id}`);
        await page.waitForFunction((st) => document.body.dataset.runStatus === st, status, { timeout: 30_000 });
        expect(await page.textContent(`.badge.s-${status}`)).toBe(status);
        expect(await page.textContent("p.notice")).toBe(reason);
        expect(await page.$$("p.error:not([hidden])")).toHaveLength(0);
      }
      await page.screenshot({ path: join(ARTIFACTS, "exit-blocked.png"), fullPage: true });
      await page.goto(`${url}?status=skipped`);
      await page.waitForSelector(`td .badge.s-skipped`);
      expect(await page.$$eval("table.runs tbody tr", (rows) => rows.length)).toBe(1);
      const api = await page.evaluate(async () => (await fetch("api/runs?status=skipped")).json());
      expect((api as { runs: { id: string; status: string }[] }).runs.map((r) => [r.id, r.status])).toEqual([[skipped.id, "skipped"]]);
      expect(errors).toEqual([]);
    } finally {
      await leavePageAndStopServer(page, server);
    }
  }, 120_000);

  test("a stage's panel lists its messages with their delivery states and reasons", async () => {
    const home = makeTempDir();
    const dir = makeTempDir();
    const gate = join(dir, "gate");
    const fixtureFile = join(import.meta.dir, "..", "intercom", "fixtures", "delivery-states.ts");
    const fake = await startFakeOpenAI(inOrder(text("done")));
    const env = { GATE_FILE: gate, OUT_DIR: dir, ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
    const run = await startRun(home, fixtureFile, [], { env });
    await run.out.waitFor(/stage gate started/);
    for (const [stage, message] of [["agent", "hello agent"], ["flaky", "hello flaky"]] as const) {
      expect((await runAtomic(["send", run.id, stage, message], { home, env })).code).toBe(0);
    }
    writeFileSync(gate, "");
    expect(await run.proc.exited).toBe(0);
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await keptPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      await page.waitForFunction(completed, undefined, { timeout: 30_000 });
      for (const [stage, state, reason] of [
        ["agent", "received", null],
        ["flaky", "session-replaced", " (the session of attempt 1 was replaced by attempt 2, which was given the message again)"],
      ] as const) {
        await page.click(`svg.graph g.node[data-name="${stage}"]`);
        await page.waitForSelector(`#stage-messages li.msg[data-state="${state}"]`);
        expect(await page.textContent(`#stage-messages li.msg .badge`)).toBe(state);
        expect(await page.textContent(`#stage-messages li.msg`)).toBe(`${state} hello ${stage}${reason ?? ""}`);
      }
      await page.screenshot({ path: join(ARTIFACTS, "stage-messages.png"), fullPage: true });
      expect(errors).toEqual([]);
    } finally {
      await leavePageAndStopServer(page, server);
      await fake.close();
    }
  }, 120_000);

  test("an agent stage whose output is empty is flagged with a warning: the run's output, show, the stage's panel", async () => {
    const home = makeTempDir();
    const dir = makeTempDir();
    const file = join(dir, "empty-answer.ts");
    writeFileSync(file, 'import { workflow } from "atomic";\nexport default workflow({ name: "empty-answer", async run(ctx) { return (await ctx.task("quiet", { prompt: "say nothing", model: "fake-model" })).text; } });\n');
    const fake = await startFakeOpenAI(inOrder(text("")));
    const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
    try {
      const r = await runAtomic(["run", file], { home, env });
      expect(r.code).toBe(0);
      const id = /started run ([0-9a-z]{18})/.exec(r.stdout)![1]!;
      const warning = `the stage's output is empty (${join(home, "artifacts", id, "0-quiet", "attempt-1")}`;
      expect(r.stderr).toContain(`warning: stage quiet: ${warning}`);
      const show = await runAtomic(["show", id], { home });
      expect(show.stdout).toContain(`warning: ${warning}`);
      // the attempt's transcript says it too, before its outcome
      const transcript = readFileSync(join(home, "artifacts", id, "0-quiet", "attempt-1", "transcript.md"), "utf8");
      expect(transcript).toEndWith("## Warning\n\nthe stage's output is empty: the agent's final answer has no text\n\n## Outcome\n\ncompleted\n\n");
      const { proc: server, url, login } = await startServe(home);
      const { page, errors } = await keptPage();
      try {
        await signIn(page, login, url);
        await page.goto(`${url}runs/${id}`);
        await page.waitForFunction(completed, undefined, { timeout: 30_000 });
        await page.click('svg.graph g.node[data-name="quiet"]');
        await page.waitForSelector("p.stage-warning");
        expect(await page.textContent("p.stage-warning")).toStartWith(`warning: ${warning}`);
        expect(errors).toEqual([]);
      } finally {
        await leavePageAndStopServer(page, server);
      }
    } finally {
      await fake.close();
    }
  }, 120_000);

  test("an agent stage's transcript is a conversation with per-turn tokens and cost, tool calls collapsed", async () => {
    const fake = await startFakeOpenAI((_req, n) =>
      n === 0 ? toolCall("list", {}, { usage: { prompt: 120, completion: 7, cost: 0.0012 } }) : text("All the files look fine.\n\n## Summary\nnothing to fix", { prompt: 200, completion: 12, cost: 0.002 }),
    );
    const home = makeTempDir();
    const project = makeTempDir();
    writeFileSync(join(project, "notes.txt"), "hello\n");
    const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
    const { proc: server, url, login } = await startServe(home);
    const { page, errors } = await keptPage();
    try {
      const run = await startRun(home, "agent.ts", [], { env, cwd: project });
      expect(await run.proc.exited).toBe(0);
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      await page.waitForFunction(completed, undefined, { timeout: 30_000 });
      await page.click('svg.graph g.node[data-name="agent"]');
      await page.waitForSelector("#conversation .turn-usage", { timeout: 15_000 });
      expect(await page.$$eval("#conversation .msg", (els) => els.map((e) => e.getAttribute("data-role")))).toEqual(["user", "assistant", "assistant", "note"]);
      expect(await page.textContent("#conversation .msg.user .text")).toBe("check the files");
      expect(await page.$$eval("#conversation .turn-usage", (els) => els.map((e) => e.textContent))).toEqual(["120 in · 7 out · $0.0012", "200 in · 12 out · $0.002"]);
      // the model's own "## Summary" stays its text
      expect(await page.locator("#conversation .msg.assistant").nth(1).locator(".text").textContent()).toContain("## Summary\nnothing to fix");
      // the tool call: collapsed, its result shown on a click
      const tool = page.locator('#conversation details.tool-call[data-tool="list"]');
      expect(await tool.getAttribute("open")).toBeNull();
      expect(await tool.locator("pre.tool-result").isVisible()).toBe(false);
      await tool.locator("summary").click();
      expect(await tool.locator("pre.tool-result").isVisible()).toBe(true);
      expect(await tool.locator("pre.tool-result").textContent()).toContain("notes.txt");
      expect(await page.isVisible("#stage-stdout")).toBe(false);
      await page.screenshot({ path: join(ARTIFACTS, "agent-conversation.png"), fullPage: true });
      expect(errors).toEqual([]);
    } finally {
      await leavePageAndStopServer(page, server);
      await fake.close();
    }
  }, 120_000);
});

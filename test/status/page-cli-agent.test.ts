/**
 * The status page in Chromium (issue 13 item 20) draws a CLI agent's
 * transcript as the same conversation as the openai runner's: the user's
 * prompt, one assistant turn per model call with its tokens and cost, the
 * tool call collapsed with its outcome, a warning as a note. The stage is
 * run by the real pi CLI (test/agents) against the fake Chat Completions
 * provider; pi's own price table gives the cost. The stage's usage and the
 * run's on the page are what the fake billed, and what `show`, `runs` and
 * `usage` give (the journal's sums), to the token and the micro-dollar.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { chatAgentSetup, MODEL, startNetworkTrap } from "../helpers/chat-agents.ts";
import { startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle } from "../e2e/support.ts";
import { expectRunUsage } from "../helpers/usage-sums.ts";
import { ARTIFACTS, HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startServe } from "./browser-support.ts";

declare const document: { body: { dataset: Record<string, string | undefined> } };

const WORKFLOW = join(import.meta.dir, "..", "runners", "fixtures", "chat-agent-stages.ts");
const trap = startNetworkTrap();

beforeAll(launchBrowser);
afterEach(cleanupWhenIdle);
afterAll(async () => {
  await releaseBrowser();
  await cleanupNow();
  trap.stop();
  expect(trap.strays).toEqual([]);
});

describe.skipIf(!HAVE_CHROMIUM)("a CLI agent's transcript on the status page", () => {
  test("pi: the conversation with per-turn tokens and cost, its tool call collapsed, a refused tool as a warning note", async () => {
    // three calls: bash (allowed), grep (not among the stage's tools: pi refuses it), the answer
    const fake = await startFakeOpenAI((req) => {
      const results = req.body.messages.filter((m) => m.role === "tool").length;
      if (results === 0) return toolCall("bash", { command: "echo hi-from-pi" }, { usage: { prompt: 1200, completion: 70 } });
      if (results === 1) return toolCall("grep", { pattern: "hi" }, { usage: { prompt: 1500, completion: 80 } });
      return text("The file says hi. I could not use grep.", { prompt: 2000, completion: 120 });
    });
    const { home, cwd, env } = chatAgentSetup("pi", fake.url, { trap });
    const r = await runAtomic(["run", WORKFLOW, "--json", "--workers", "1", "--input", "runner=pi", "--input", `model=${MODEL}`, "--input", `prompts=${JSON.stringify(["look at the files"])}`, "--input", `tools=${JSON.stringify(["bash"])}`], { home, cwd, env, timeoutMs: 150_000 });
    expect(r.code).toBe(0);
    const runId = JSON.parse(r.stdout.trim().split("\n").at(-1)!).runId as string;
    // What the fake billed (pi prices it from its table: 1 micro-dollar an input token, 2 an output token) is what
    // show, runs and usage give.
    const billed = { inputTokens: 1200 + 1500 + 2000, outputTokens: 70 + 80 + 120, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: 1340 + 1660 + 2240 };
    await expectRunUsage(home, runId, ["s0"], billed);
    const { proc: server, url, login } = await startServe(home, env);
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${runId}`);
      await page.waitForFunction(() => document.body.dataset.runStatus === "completed", undefined, { timeout: 30_000 });
      await page.click('svg.graph g.node[data-name="s0"]');
      await page.waitForSelector("#conversation .turn-usage", { timeout: 15_000 });
      expect(await page.$$eval("#conversation .msg", (els) => els.map((e) => e.getAttribute("data-role")))).toEqual(["user", "assistant", "assistant", "note", "assistant", "note"]);
      expect((await page.textContent("#conversation .msg.user .text"))!.trim()).toBe("look at the files");
      // pi's cost per call from its price table: 1200×1 + 70×2, 1500×1 + 80×2, 2000×1 + 120×2 micro-dollars
      expect(await page.$$eval("#conversation .turn-usage", (els) => els.map((e) => e.textContent))).toEqual(["1200 in · 70 out · $0.00134", "1500 in · 80 out · $0.00166", "2000 in · 120 out · $0.00224"]);
      expect(await page.$$eval("#conversation .msg.assistant .who", (els) => els.map((e) => e.textContent))).toEqual(["assistant · turn 1", "assistant · turn 2", "assistant · turn 3"]);
      // The stage's usage and the run's, as the page formats them: the same sums.
      expect(await page.textContent("#stage-usage")).toBe("4970 tokens, $0.00524");
      expect(await page.textContent("#t-tokens b")).toBe("4970");
      expect(await page.textContent("#t-cost b")).toBe("$0.00524");
      // each call's tool in its turn: one collapsed block (its start and end folded)
      const tool = page.locator("#conversation .msg.assistant").nth(0).locator('details.tool-call[data-tool="bash"]');
      expect(await page.locator("#conversation details.tool-call").count()).toBe(2);
      expect(await page.locator("#conversation .msg.assistant").nth(1).locator('details.tool-call.failed[data-tool="grep"]').count()).toBe(1);
      expect(await page.locator("#conversation .msg.note").nth(0).locator(".who").textContent()).toBe("warning");
      expect(await page.locator("#conversation .msg.note").nth(0).locator(".text").textContent()).toMatch(/^pi refused the tool grep \(\{"pattern":"hi"\}\): Tool grep not found; hint: .*tools: \["bash","grep"\]$/);
      expect(await tool.getAttribute("open")).toBeNull();
      expect(await tool.locator("summary").textContent()).toContain('{"command":"echo hi-from-pi"}');
      await tool.locator("summary").click();
      expect(await tool.locator("pre.tool-result").textContent()).toBe("ok");
      expect(await page.locator("#conversation .msg.assistant").nth(2).locator(".text").textContent()).toBe("The file says hi. I could not use grep.");
      expect(await page.isVisible("#stage-stdout")).toBe(false);
      await page.screenshot({ path: join(ARTIFACTS, "cli-agent-conversation.png"), fullPage: true });
      expect(errors).toEqual([]);
    } finally {
      await closePageAndServer(page, server);
      await fake.close();
    }
  }, 180_000);
});

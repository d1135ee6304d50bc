/**
 * The run tools through the stage MCP server with a real agent CLI (test/agents,
 * pinned versions) against its fake provider (docs/design/stage-tools.md):
 * claude calls mcp__atomic__message to a stage that has not started yet;
 * the stage MCP server carries it to the run's driver, the tool's result
 * reaches the model, and the next stage reads the message on its stdin.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { AGENT_TEST_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { claudeHome } from "../helpers/agent-homes.ts";
import { startFakeAnthropic, text, toolUse } from "../helpers/fake-anthropic.ts";
import { cleanupNow, cleanupWhenIdle, parseNdjson } from "../e2e/support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

agentTest("claude: message to a stage not started yet, through the stage MCP server", async () => {
  const fake = await startFakeAnthropic();
  try {
    fake.push(toolUse("mcp__atomic__message", { to: "reader", text: "the secret is 42" }), text("told the reader"));
    const h = claudeHome(fake);
    const r = await runAtomic(["run", join(import.meta.dir, "fixtures", "claude-run-tools.ts"), "--json"], { home: h.home, env: h.env, timeoutMs: AGENT_TEST_LIMIT_MS });
    const result = parseNdjson(r.stdout).at(-1) as { outputs?: { writer: string; reader: string } };
    expect(r.code).toBe(0);
    expect(result.outputs).toEqual({ writer: "told the reader", reader: "the secret is 42\n" });
    // The tool's result (where the message went) reached the model as claude's tool_result.
    const second = JSON.stringify(fake.calls[1]!.body.messages);
    expect(second).toContain("sent to reader (queued until it starts)");
    // The tools claude was offered include the stage MCP server's, under claude's MCP naming.
    expect(JSON.stringify(fake.calls[0]!.body.tools)).toContain("mcp__atomic__message");
    fake.assertOnlyFake();
  } finally {
    await fake.close();
  }
});

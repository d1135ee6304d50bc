/**
 * The stage MCP server (dist/atomic in its stage-MCP role, driven by the
 * MCP SDK's client as an agent CLI drives it) with a credential of another
 * run: run B is live (its agent stage's model call held by the fake
 * provider), the server's link names run B, the credential is one of run
 * A's. The tool call is an error result of one sentence, and run B's inbox
 * stays empty. A credential no attempt of run B holds is refused the same
 * way.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { atomicBin, environment, runAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI } from "../helpers/fake-openai.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { startChat } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

e2eTest("the stage MCP server refuses a credential of another run in one sentence, and changes nothing", async () => {
  const gate = Promise.withResolvers<void>();
  const fake = await startFakeOpenAI((req) => (JSON.stringify(req.body.messages).includes("hold me") ? { text: "held", hold: gate.promise } : { text: "done" }));
  const home = makeTempDir("atomic-stage-mcp-cred-");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  let client: Client | undefined;
  try {
    const a = await startChat(home, env);
    expect(await a.proc.exited).toBe(0);
    const b = await startChat(home, env, ["--input", "prompt=hold me"]);
    await fake.requestMatching((r) => JSON.stringify(r.body.messages).includes("hold me"));
    const call = async (token: string) => {
      client = new Client({ name: "atomic-test", version: "1.0.0" });
      const link = JSON.stringify({ home, rootId: b.runId, token, tools: ["message"] });
      await client.connect(new StdioClientTransport({ command: atomicBin(), args: ["--internal-stage-mcp"], env: { ...environment({ home, env }), ATOMIC_STAGE_TOOLS: link }, stderr: "inherit" }));
      const result = (await client.callTool({ name: "message", arguments: { to: "chat", text: "from the wrong run" } })) as { isError?: boolean; content: { type: string; text: string }[] };
      await client.close();
      client = undefined;
      return result;
    };
    const other = await call(`${a.runId}.${"f".repeat(32)}`);
    expect(other.isError).toBe(true);
    expect(other.content[0]!.text).toBe(`error: this stage credential belongs to run ${a.runId}, not to run ${b.runId}; a stage can reach only its own run`);
    const unknown = await call(`${b.runId}.${"f".repeat(32)}`);
    expect(unknown.isError).toBe(true);
    expect(unknown.content[0]!.text).toStartWith("error: this stage credential is not valid");
    const inbox = JSON.parse((await runAtomic(["inbox", b.runId, "--json"], { home, env })).stdout) as { stages: unknown[] };
    expect(inbox.stages).toEqual([]);
    gate.resolve();
    expect(await b.proc.exited).toBe(0);
  } finally {
    gate.resolve();
    await client?.close();
    await fake.close();
  }
});

/**
 * The README's first agent workflow (the ```ts block that starts with
 * `// triage.ts`) runs as the README says: against an OpenAI-compatible
 * endpoint on this machine (here the tests' fake provider, where the README
 * names Ollama), with ATOMIC_OPENAI_BASE_URL and ATOMIC_MODEL and no key.
 * The plan stage answers through the schema the workflow gives it.
 */

import { afterEach, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, toolCall, type FakeOpenAI } from "../helpers/fake-openai.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { parsePage } from "./markdown.ts";

let server: FakeOpenAI | undefined;
afterEach(async () => {
  await killSpawned();
  await server?.close();
  server = undefined;
  removeTempDirs();
});

test("the README's triage workflow runs against a local OpenAI-compatible endpoint", async () => {
  const block = parsePage("README.md").code.find((c) => c.language === "ts" && c.text.startsWith("// triage.ts"));
  expect(block).toBeDefined();
  server = await startFakeOpenAI((req) => {
    const tools = ((req.body as { tools?: { function: { name: string } }[] }).tools ?? []).map((t) => t.function.name);
    return tools.includes("structured_output") ? toolCall("structured_output", { steps: ["accept a trailing comma"], risk: "low" }) : text("ok");
  });
  const dir = makeTempDir("atomic-readme-");
  const home = join(dir, "home");
  writeFileSync(join(dir, "triage.ts"), block!.text);
  const r = await runAtomic(["run", "triage.ts", "--input", "issue=the parser rejects trailing commas", "--json"], {
    home,
    cwd: dir,
    env: { ATOMIC_OPENAI_BASE_URL: server.url, ATOMIC_MODEL: "qwen2.5-coder:7b", OPENAI_API_KEY: undefined },
  });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const result = r.stdout.trim().split("\n").map((l) => JSON.parse(l) as { type: string; status?: string; outputs?: unknown }).find((e) => e.type === "result");
  expect(result?.status).toBe("completed");
  expect(result?.outputs).toEqual({ plan: { steps: ["accept a trailing comma"], risk: "low" }, review: "ok" });
  expect(server.requests.every((q) => (q.body as { model?: string }).model === "qwen2.5-coder:7b")).toBe(true);
}, 120_000);

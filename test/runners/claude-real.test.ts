/**
 * The claude runner with the real Claude Code CLI (test/agents, pinned
 * version) through dist/atomic, pointed at the fake Anthropic provider
 * (test/helpers/fake-anthropic.ts) with its own HOME and XDG directories,
 * its non-essential traffic off and every other connection sent to the
 * fake's trap: each test fails if claude tried to reach anything else.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { agentBin } from "../helpers/agents.ts";
import { httpError, startFakeAnthropic, streamError, text, toolUse, type FakeAnthropic } from "../helpers/fake-anthropic.ts";
import { isLive, processesWithEnv } from "../helpers/processes.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, parseNdjson, startedRunId } from "../e2e/support.ts";

const WF = join(import.meta.dir, "fixtures", "claude-stage.ts");
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

interface Setup {
  fake: FakeAnthropic;
  home: string;
  env: Record<string, string>;
  marker: string;
}

/** A fresh fake provider, atomic home and claude HOME (XDG dirs inside it). */
async function setup(): Promise<Setup> {
  const fake = await startFakeAnthropic();
  const home = makeTempDir("atomic-claude-home-");
  const user = makeTempDir("atomic-claude-user-");
  for (const d of [".config", ".cache", ".local/share", ".local/state"]) mkdirSync(join(user, d), { recursive: true });
  writeFileSync(join(home, "config.json"), JSON.stringify({ runners: { claude: { path: agentBin("claude") } } }));
  const marker = `m${crypto.randomUUID().slice(0, 8)}`;
  const env = {
    HOME: user,
    XDG_CONFIG_HOME: join(user, ".config"),
    XDG_CACHE_HOME: join(user, ".cache"),
    XDG_DATA_HOME: join(user, ".local/share"),
    XDG_STATE_HOME: join(user, ".local/state"),
    ANTHROPIC_BASE_URL: fake.url,
    ANTHROPIC_API_KEY: "sk-ant-fake",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_TELEMETRY: "1",
    DISABLE_ERROR_REPORTING: "1",
    CLAUDE_CODE_MAX_RETRIES: "2",
    CLAUDE_TEST_MARKER: marker,
    ...fake.proxyEnv(),
  };
  return { fake, home, env, marker };
}

async function run(s: Setup, inputs: Record<string, string>, extra: string[] = []) {
  const args = ["run", WF, "--json", ...Object.entries(inputs).flatMap(([k, v]) => ["--input", `${k}=${v}`]), ...extra];
  const r = await runAtomic(args, { home: s.home, env: s.env, timeoutMs: 90_000 });
  const lines = parseNdjson(r.stdout);
  return { ...r, result: lines.at(-1) as { runId: string; outputs?: Record<string, any>; status?: string } | undefined };
}

async function show(s: Setup, runId: string) {
  return (await runAtomic(["show", runId], { home: s.home, env: s.env })).stdout;
}

async function done(s: Setup) {
  try {
    s.fake.assertOnlyFake();
  } finally {
    await s.fake.close();
  }
}

/** Every text the CLI sent the model as the user's (claude also puts "system" entries in `messages`). */
const userText = (body: any): string =>
  body.messages
    .filter((m: any) => m.role === "user")
    .map((m: any) => (typeof m.content === "string" ? m.content : m.content.map((b: any) => b.text ?? (typeof b.content === "string" ? b.content : "")).join("\n")))
    .join("\n");

e2eTest(
  "a text reply: the answer, the prompt delivered, usage and claude's own cost exact",
  async () => {
    const s = await setup();
    s.fake.push(text("Hello from the fake", { input: 11, output: 3, cacheRead: 5, cacheWrite: 2 }));
    const r = await run(s, { prompt: "say hello" });
    expect(r.code).toBe(0);
    expect(r.result!.outputs!.text).toBe("Hello from the fake");
    // opus-4 family prices (claude's table): 11 in × $5/M + 3 out × $25/M + 5 cache reads × $0.5/M + 2 writes × $6.25/M = $0.00014500
    expect(r.result!.outputs!.usage).toMatchObject({ inputTokens: 11, outputTokens: 3, cacheReadTokens: 5, cacheWriteTokens: 2, costMicroUsd: 145, turns: 1 });
    expect(s.fake.calls).toHaveLength(1);
    expect(userText(s.fake.calls[0]!.body)).toContain("say hello");
    await done(s);
  },
  120_000,
);

e2eTest(
  "a tool call: tools named in atomic's terms reach claude as its own; Bash runs; usage summed over both model calls",
  async () => {
    const s = await setup();
    const dir = makeTempDir("atomic-claude-tool-");
    const file = join(dir, "made-by-bash");
    s.fake.push(toolUse("Bash", { command: `touch ${file}`, description: "make a file" }, { input: 100, output: 7, cacheRead: 50, cacheWrite: 20 }), text("made it", { input: 120, output: 9, cacheRead: 60 }));
    const r = await run(s, { prompt: "make the file", tools: JSON.stringify(["bash", "read", "list", "grep"]) });
    expect(r.code).toBe(0);
    expect(existsSync(file)).toBe(true);
    expect(s.fake.calls[0]!.body.tools.map((t: any) => t.name).sort()).toEqual(["Bash", "Glob", "Grep", "Read"]);
    const result = s.fake.calls[1]!.body.messages.at(-1).content.find((b: any) => b.type === "tool_result");
    expect(result.is_error).toBeFalsy();
    expect(r.result!.outputs!.usage).toMatchObject({ inputTokens: 220, outputTokens: 16, cacheReadTokens: 110, cacheWriteTokens: 20, turns: 2 });
    await done(s);
  },
  120_000,
);

e2eTest(
  "tools: [] gives claude no tools at all",
  async () => {
    const s = await setup();
    s.fake.push(text("no tools here"));
    const r = await run(s, { prompt: "hi", tools: "[]" });
    expect(r.code).toBe(0);
    expect(s.fake.calls[0]!.body.tools ?? []).toEqual([]);
    await done(s);
  },
  120_000,
);

e2eTest(
  "a tool claude refused is a warning on the stage: in the transcript and in show",
  async () => {
    const s = await setup();
    const dir = makeTempDir("atomic-claude-deny-");
    s.fake.push(toolUse("Write", { file_path: join(dir, "x.txt"), content: "nope" }), text("could not write"));
    const r = await run(s, { prompt: "write it" }); // claude's default tools and permissions: Write needs an approval nobody can give
    expect(r.code).toBe(0);
    expect(existsSync(join(dir, "x.txt"))).toBe(false);
    const out = await show(s, r.result!.runId);
    expect(out).toMatch(/warning: claude refused the tool Write/);
    await done(s);
  },
  120_000,
);

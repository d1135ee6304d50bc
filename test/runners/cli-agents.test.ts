/**
 * The CLI agent adapters (claude, codex, gemini, opencode, pi) against a
 * scripted fake of each CLI (fixtures/fake-agent.ts emitting their recorded
 * event shapes): parsing, usage normalization (cache never counted twice),
 * session ids, success from the final event (error results that exit 0
 * fail the stage), structured output, delivery modes, and cancel (the whole
 * process group is gone afterwards).
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { opencodeConfig } from "../../src/runners/cli-agents/opencode.ts";
import { getRunner } from "../../src/runners/registry.ts";
import { killAllGroups, liveGroupCount } from "../../src/runners/shell/process-groups.ts";
import type { RunnerEvent, StageRequest } from "../../src/runners/types.ts";
import { processGone, waitUntil } from "../engine/helpers.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const FAKE = join(import.meta.dir, "fixtures", "fake-agent.ts");
let bin: string;

beforeAll(() => {
  // Not a makeTempDir: it must outlive each test's cleanup (removed in afterAll).
  bin = mkdtempSync(join(tmpdir(), "atomic-fake-bin-"));
  for (const kind of ["claude", "codex", "gemini", "opencode", "pi"]) {
    const path = join(bin, kind);
    writeFileSync(path, `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(FAKE)} ${kind} "$@"\n`);
    chmodSync(path, 0o755);
  }
});

afterAll(() => rmSync(bin, { recursive: true, force: true }));

afterEach(async () => {
  try {
    await waitUntil(() => liveGroupCount() === 0, "agent process groups to end", 10_000);
  } finally {
    // A failed test must not leave an agent behind (they run detached, in their own groups).
    killAllGroups("SIGKILL");
    removeTempDirs();
  }
});

interface Started {
  dir: string;
  events: RunnerEvent[];
  handle: ReturnType<ReturnType<typeof getRunner>["start"]>;
}

function start(kind: string, scenario = "ok", agent: StageRequest["agent"] = {}, extra: Partial<StageRequest> = {}): Started {
  const dir = makeTempDir(`atomic-${kind}-`);
  const events: RunnerEvent[] = [];
  const request: StageRequest = {
    runId: "run-cli",
    stageKey: "0",
    stageName: "agent",
    attempt: 1,
    runner: kind,
    prompt: "fix the bug",
    cwd: dir,
    artifactDir: join(dir, "artifacts"),
    env: { FAKE_AGENT_SCENARIO: scenario, FAKE_AGENT_DIR: dir },
    ...extra,
    agent: { binary: join(bin, kind), ...agent },
  };
  const handle = getRunner(kind).start(request, (e) => events.push(e));
  return { dir, events, handle };
}

/** The fake agent's log lines so far; a line it is still appending (no newline yet) is left for the next read. */
function logOf(dir: string): { argv?: string[]; stdin?: Record<string, unknown> }[] {
  const path = join(dir, "log.jsonl");
  if (!existsSync(path)) return [];
  const text = readFileSync(path, "utf8");
  return text
    .slice(0, text.lastIndexOf("\n") + 1)
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l));
}

describe("parsing and usage normalization", () => {
  test("claude: session assigned up front, text, tools, reported cost; input excludes cache", async () => {
    const { handle, events, dir } = start("claude", "ok", {}, { model: "claude-sonnet-4-5" });
    const r = await handle.result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("Done: fix the bug");
    expect(r.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    const argv = logOf(dir)[0]!.argv!;
    expect(argv).toContain("--session-id");
    expect(argv[argv.indexOf("--session-id") + 1]).toBe(r.sessionId!);
    expect(argv).toEqual(expect.arrayContaining(["-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json", "--model", "claude-sonnet-4-5"]));
    expect(r.usage).toEqual({ inputTokens: 10, cacheReadTokens: 3000, cacheWriteTokens: 200, outputTokens: 50, costMicroUsd: 12300, turns: 2, model: "claude-sonnet-4-5" });
    expect(events.some((e) => e.type === "tool_start" && e.name === "Bash")).toBe(true);
    // raw events were written before parsing; the transcript is readable
    expect(readFileSync(r.eventsPath!, "utf8")).toContain('"type":"result"');
    expect(readFileSync(r.transcriptPath!, "utf8")).toContain("Done: fix the bug");
  });

  test("codex: thread id recorded from the first event; input includes cache (input = input − cached); priced from the table", async () => {
    const { handle } = start("codex", "ok", { pricing: { "gpt-5-codex": { inputPerMTok: 1.25, outputPerMTok: 10, cacheReadPerMTok: 0.125 } } }, { model: "gpt-5-codex" });
    const r = await handle.result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("Done: fix the bug");
    expect(r.sessionId).toBe("0199a213-81c0-7800-8aa1-bbab2a035a53");
    expect(r.usage).toMatchObject({ inputTokens: 1000, cacheReadTokens: 4000, outputTokens: 120, turns: 1 });
    // 1000 × 1.25 + 4000 × 0.125 + 120 × 10 micro-dollars
    expect(r.usage!.costMicroUsd).toBe(1250 + 500 + 1200);
    expect(r.usage!.unpriced).toBeUndefined();
  });

  test("gemini: deltas concatenated, session assigned up front, cached split out; no price: unpriced", async () => {
    const { handle, dir } = start("gemini");
    const r = await handle.result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("Done: fix the bug");
    // assigned up front (--session-id), the prompt on stdin
    const argv = logOf(dir)[0]!.argv!;
    expect(r.sessionId).toBe(argv[argv.indexOf("--session-id") + 1]);
    expect(argv).not.toContain("fix the bug");
    expect(r.usage).toMatchObject({ inputTokens: 400, cacheReadTokens: 800, outputTokens: 100, costMicroUsd: 0, unpriced: true });
  });

  test("opencode: per-step tokens and cost summed; cache reads and writes apart from input", async () => {
    const { handle } = start("opencode");
    const r = await handle.result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("Done: fix the bug");
    expect(r.sessionId).toBe("ses_4b2fa1c0ffee");
    expect(r.usage).toMatchObject({ inputTokens: 150, outputTokens: 35, cacheReadTokens: 2100, cacheWriteTokens: 50, costMicroUsd: 3000, turns: 2 });
  });

  test("opencode: its config switches snapshots off unless the given OPENCODE_CONFIG_CONTENT names them; the given settings are kept", () => {
    expect(JSON.parse(opencodeConfig({ cwd: "/w" }, undefined))).toMatchObject({ snapshot: false, agent: { title: { disable: true } } });
    expect(JSON.parse(opencodeConfig({ cwd: "/w" }, JSON.stringify({ snapshot: true, model: "p/m" })))).toMatchObject({ snapshot: true, model: "p/m" });
  });

  test("pi: rpc prompt, usage one to one, reported cost", async () => {
    const { handle, dir } = start("pi");
    const r = await handle.result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("Done: fix the bug");
    expect(logOf(dir)[2]!.stdin).toEqual({ type: "prompt", message: "fix the bug" });
    expect(r.usage).toMatchObject({ inputTokens: 10, outputTokens: 20, cacheReadTokens: 300, cacheWriteTokens: 40, costMicroUsd: 570, turns: 1 });
    // the session is a file under the stage's artifact dir; its id is what get_state said
    expect(logOf(dir)[0]!.argv![logOf(dir)[0]!.argv!.indexOf("--session") + 1]).toEndWith("/pi-session.jsonl");
    expect(r.sessionId).toBe("01a2312b-pi-session");
  });

  test("pi: continuing a session whose file is not on this machine fails saying so, and starts no new session", async () => {
    const gone = join(makeTempDir("atomic-pi-gone-"), "run-cli", "1-first", "attempt-1");
    const { handle, dir } = start("pi", "ok", {}, { continueFrom: { artifactDir: gone, fork: false } });
    const r = await handle.result;
    expect(r.status).toBe("failed");
    expect(r.error).toEqual({ code: "bad_continue", message: `continueFrom: the earlier stage left no pi session (${gone}/pi-session.jsonl does not exist): continue a stage that the pi runner ran` });
    expect(logOf(dir)).toEqual([]);
  });
});

describe("success from the final event", () => {
  for (const [kind, message] of [
    ["claude", "claude reported an error: API Error: 529"],
    ["codex", "codex: the provider's reply broke off: stream disconnected before completion (codex exited with status 0)"],
    ["gemini", "gemini reported an error: Quota exceeded for model (gemini exited with status 0)"],
    ["opencode", "opencode: the provider refused the API key (HTTP 401): invalid x-api-key"],
    ["pi", "pi: the provider refused the API key (HTTP 401): invalid api key"],
  ] as const) {
    test(`${kind}: an error result that exits 0 fails the stage`, async () => {
      const r = await start(kind, "error").handle.result;
      expect(r.status).toBe("failed");
      expect(r.exitCode).toBe(0);
      expect(r.error!.message).toContain(message);
    });
  }

  test("no final event: failed, naming the exit code (gemini's codes explained)", async () => {
    let r = await start("codex", "noresult").handle.result;
    expect(r.status).toBe("failed");
    expect(r.error).toEqual({ code: "agent_failed", message: "codex ended without a final event: it exited with code 3" });
    r = await start("gemini", "noresult").handle.result;
    expect(r.error!.message).toBe("gemini ended without a final event: it failed to authenticate (exit 41)");
  });
});

describe("structured output", () => {
  const schema = { type: "object", properties: { verdict: { enum: ["ok", "bad"] }, score: { type: "integer" } }, required: ["verdict", "score"] };

  test("claude passes the schema natively; gemini is asked in the prompt and its JSON answer parsed", async () => {
    const c = start("claude", "json", { schema });
    const rc = await c.handle.result;
    expect(rc.structured).toEqual({ verdict: "ok", score: 3 });
    const argv = logOf(c.dir)[0]!.argv!;
    expect(JSON.parse(argv[argv.indexOf("--json-schema") + 1]!)).toEqual(schema);
    const g = start("gemini", "json", { schema });
    const rg = await g.handle.result;
    expect(rg.structured).toEqual({ verdict: "ok", score: 3 });
    expect((logOf(g.dir) as { prompt?: string }[]).find((l) => l.prompt)!.prompt).toContain("Reply with ONLY a JSON value");
  });

  test("an answer that does not match fails clearly", async () => {
    const r = await start("opencode", "ok", { schema }).handle.result;
    expect(r.status).toBe("failed");
    expect(r.error!.code).toBe("structured_output_invalid");
  });
});

describe("delivery modes", () => {
  test("codex (no input while running): a steer is queued and delivered by resuming the thread by id", async () => {
    const { handle, dir } = start("codex", "gated");
    await waitUntil(() => logOf(dir).length === 1, "codex to start");
    await handle.send("also update the docs", "steer");
    writeFileSync(join(dir, "gate"), "");
    const r = await handle.result;
    expect(r.status).toBe("completed");
    const calls = logOf(dir).map((l) => l.argv!);
    expect(calls.length).toBe(2);
    // options before `resume` (after it codex exits 2), the message on stdin
    expect(calls[1]!.slice(-3)).toEqual(["resume", "0199a213-81c0-7800-8aa1-bbab2a035a53", "-"]);
    expect(calls[1]!.slice(0, 2)).toEqual(["exec", "--json"]);
    expect(r.text).toBe("Done: also update the docs");
    // turn.completed's usage is the thread's running total: each turn counted once
    expect(r.usage).toMatchObject({ turns: 2, inputTokens: 2000, cacheReadTokens: 8000, outputTokens: 240 });
  });

  test("claude (stream-json input): steer is written to stdin at once; followUp after the turn's result", async () => {
    const { handle, dir } = start("claude", "gated");
    await waitUntil(() => logOf(dir).some((l) => l.stdin), "claude to read its first turn");
    await handle.send("steer: check the tests", "steer");
    await waitUntil(() => logOf(dir).filter((l) => l.stdin).length === 2, "the steer line");
    await handle.send("follow: then summarize", "followUp");
    writeFileSync(join(dir, "gate"), "");
    const r = await handle.result;
    expect(r.status).toBe("completed");
    const lines = logOf(dir).filter((l) => l.stdin).map((l) => (l.stdin!.message as { content: string }).content);
    expect(lines).toEqual(["fix the bug", "steer: check the tests", "follow: then summarize"]);
    // usage is cumulative per claude process: three results, counted once each
    expect(r.usage).toMatchObject({ inputTokens: 30, cacheReadTokens: 9000, outputTokens: 150, costMicroUsd: 36900 });
  });

  test("pi (rpc): steer is native; interrupt is abort, then the message as a prompt", async () => {
    const { handle, dir } = start("pi", "gated");
    await waitUntil(() => logOf(dir).some((l) => l.stdin), "pi to read its prompt");
    await handle.send("steer: smaller diff", "steer");
    await handle.send("stop and explain", "interrupt");
    const commands = () => logOf(dir).filter((l) => l.stdin && (l.stdin as { type: string }).type !== "get_state").map((l) => l.stdin);
    await waitUntil(() => commands().length === 3, "the rpc commands");
    writeFileSync(join(dir, "gate"), "");
    const r = await handle.result;
    expect(r.status).toBe("completed");
    // the message waits for the aborted turn's end (a prompt sent with the abort is refused by pi)
    expect(commands()).toEqual([
      { type: "prompt", message: "fix the bug" },
      { type: "steer", message: "steer: smaller diff" },
      { type: "abort" },
      { type: "prompt", message: "stop and explain" },
    ]);
  });
});

describe("cancel", () => {
  for (const kind of ["claude", "codex", "gemini", "opencode", "pi"]) {
    test(`${kind}: cancel kills the whole process group, children included`, async () => {
      const { handle, dir } = start(kind, "hang");
      const pidFile = join(dir, `${kind}.pids`);
      await waitUntil(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").includes("\n"), "the agent and its child");
      const pids = readFileSync(pidFile, "utf8").trim().split(" ").map(Number);
      handle.cancel("stop");
      const r = await handle.result;
      expect(r.status).toBe("cancelled");
      await waitUntil(() => pids.every(processGone), "agent processes to be gone");
    });
  }
});

describe("the session's states (cli-session-state.ts)", () => {
  test("codex, wrapping up: a queued message is dropped, later ones are not delivered, the turn under way is the last", async () => {
    const { handle, dir } = start("codex", "gated");
    await waitUntil(() => logOf(dir).length === 1, "codex to start");
    await handle.send("queued before the wrap-up", "steer");
    handle.wrapUp!("the budget is used up: wrap up");
    handle.wrapUp!("a second wrap-up is ignored");
    await handle.send("sent while wrapping up", "followUp");
    writeFileSync(join(dir, "gate"), "");
    const r = await handle.result;
    expect(r.status).toBe("completed");
    expect(r.text).toBe("Done: fix the bug");
    expect(logOf(dir).length).toBe(1); // no resume
    const transcript = readFileSync(r.transcriptPath!, "utf8");
    expect(transcript.match(/Wrap-up \(budget used up\)/g)?.length).toBe(1);
    expect(transcript).not.toContain("a second wrap-up is ignored");
  });

  test("claude, wrapping up: the wrap-up goes into the running turn; a cancel then still stops the stage", async () => {
    const { handle, dir } = start("claude", "gated");
    await waitUntil(() => logOf(dir).some((l) => l.stdin), "claude to read its first turn");
    handle.wrapUp!("the budget is used up: wrap up");
    await waitUntil(() => logOf(dir).filter((l) => l.stdin).length === 2, "the wrap-up line");
    const lines = logOf(dir).filter((l) => l.stdin).map((l) => (l.stdin!.message as { content: string }).content);
    expect(lines).toEqual(["fix the bug", "the budget is used up: wrap up"]);
    handle.cancel("stop");
    handle.cancel("a second cancel is ignored");
    const r = await handle.result;
    expect(r.status).toBe("cancelled");
    expect(r.error).toEqual({ code: "cancelled", message: "stop" });
  });

  test("ended: a message is refused; a cancel or a wrap-up is ignored", async () => {
    const { handle } = start("gemini");
    const r = await handle.result;
    expect(r.status).toBe("completed");
    await expect(handle.send("too late", "followUp")).rejects.toThrow("the stage has ended");
    handle.cancel("too late");
    handle.wrapUp!("too late");
    expect(readFileSync(r.transcriptPath!, "utf8")).not.toContain("too late");
  });
});

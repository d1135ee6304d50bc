/**
 * An agent stage's files (src/runners/agent-files.ts): buffered in memory,
 * written when the buffer is full, within 200 ms of a write (a live
 * stage's transcript: a timer armed by the write) and at close; created by their first write; a directory
 * that cannot be made stops the files, never the stage; a CLI runner's
 * transcript keeps one Assistant section per model call, in step with
 * turns.jsonl.
 */

import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AgentFiles } from "../../src/runners/agent-files.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterAll(removeTempDirs);

test("nothing is created before the first write; stderr.log only once something goes to it", () => {
  const dir = join(makeTempDir(), "attempt-1");
  const files = new AgentFiles(dir);
  expect(existsSync(dir)).toBe(false);
  files.section("User", "hello");
  files.raw('{"a":1}');
  files.close();
  expect(readFileSync(files.transcriptPath, "utf8")).toBe("## User\n\nhello\n\n");
  expect(readFileSync(files.eventsPath, "utf8")).toBe('{"a":1}\n');
  expect(existsSync(files.errorPath)).toBe(false);
});

test("a live stage's transcript reaches its file on the timer, before the stage ends", async () => {
  const files = new AgentFiles(makeTempDir());
  try {
    files.section("Assistant");
    files.text("thinking");
    await waitUntil(() => existsSync(files.transcriptPath) && readFileSync(files.transcriptPath, "utf8").includes("thinking"), 5_000, "the transcript on disk");
    files.text(" more");
    await waitUntil(() => readFileSync(files.transcriptPath, "utf8").endsWith("thinking more"), 5_000, "the next piece on disk");
    // The timer is armed by a write that stays buffered, also after a flush the runner asked for.
    files.text(" and");
    files.flush();
    files.text(" more again");
    await waitUntil(() => readFileSync(files.transcriptPath, "utf8").endsWith("thinking more and more again"), 5_000, "the piece after a flush on disk");
  } finally {
    files.close();
  }
});

test("a long stream is written as it grows (memory stays bounded), in order, and whole at close", () => {
  const files = new AgentFiles(makeTempDir());
  const line = `{"delta":"${"x".repeat(90)}"}`;
  for (let i = 0; i < 1_000; i++) files.raw(line);
  // 1,000 records of 100 bytes: written in 16 KiB pieces without waiting for the timer or the close
  const written = statSync(files.eventsPath).size;
  expect(written).toBeGreaterThanOrEqual(16 * 1024 * 5);
  expect(written).toBeLessThan(1_000 * (line.length + 1));
  files.close();
  const all = readFileSync(files.eventsPath, "utf8").split("\n");
  expect(all.length).toBe(1_001);
  expect(all.slice(0, 1_000).every((l) => l === line)).toBe(true);
});

test("a directory that cannot be made stops the files, not the stage", () => {
  const parent = makeTempDir();
  const blocker = join(parent, "not-a-dir");
  writeFileSync(blocker, "");
  const files = new AgentFiles(join(blocker, "attempt-1"));
  files.section("User", "hello");
  files.raw("x".repeat(20_000)); // a full buffer tries to write at once
  files.diag("something");
  expect(() => files.close()).not.toThrow();
  expect(existsSync(join(blocker, "attempt-1"))).toBe(false);
});

test("a file that cannot be opened is dropped quietly; the others are written", () => {
  const dir = makeTempDir();
  const files = new AgentFiles(dir);
  mkdirSync(files.transcriptPath); // opening it for writing fails, for root too (EISDIR)
  files.section("User", "hello");
  files.raw('{"a":1}');
  expect(() => files.close()).not.toThrow();
  expect(statSync(files.transcriptPath).isDirectory()).toBe(true);
  expect(readFileSync(files.eventsPath, "utf8")).toBe('{"a":1}\n');
});

test("a CLI runner's transcript: one Assistant section per model call, a call's tools in its section, warnings after it, turns.jsonl in step", () => {
  const dir = makeTempDir();
  const files = new AgentFiles(dir);
  const used = (input: number, turns = 1) => ({ inputTokens: input, outputTokens: 1, cacheReadTokens: 0, cacheWriteTokens: 0, costMicroUsd: turns ? 10 : null, turns });
  files.section("User", "go");
  files.assistantTool("bash", '{"command":"ls"}', "", true); // a call that only asked for a tool
  files.warning("refused something"); // inside the call: after it
  files.turnEnded(used(100));
  files.assistantTool("bash", "", "ok", true); // the tool it asked for runs after the call: still its section
  files.turnEnded(used(5, 0)); // more usage of the same call (another model of it)
  files.assistantText("done");
  files.turnEnded(used(200));
  files.turnEnded(used(300)); // a call with nothing to show: a section of its own
  files.section("Outcome", "completed");
  files.close();
  const text = readFileSync(files.transcriptPath, "utf8");
  expect(text.match(/^## \S+/gm)).toEqual(["## User", "## Assistant", "## Warning", "## Assistant", "## Assistant", "## Outcome"]);
  expect(text.split("## Warning")[0]).toContain("**tool bash** ``");
  expect(readFileSync(join(dir, "turns.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l).inputTokens)).toEqual([100, 5, 200, 300]);
});

/**
 * CLI agents and `atomic doctor` through the real binary: a claude stage
 * on a pool worker with the binary path and extra args from config.json
 * (the fake CLI), its usage in `show`; doctor's report of usable and
 * unusable runners (with hints); budget flags refused when malformed; a CLI
 * installed at a version the tests have not covered (an npm package's
 * version) gets one warning line per run, kept in `show`.
 */

import { afterAll, afterEach, beforeAll, expect } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { writeFakeCli } from "../helpers/fake-cli.ts";

const FIX = join(import.meta.dir, "fixtures");
let bin: string;

beforeAll(() => {
  bin = mkdtempSync(join(tmpdir(), "atomic-fake-bin-"));
  for (const kind of ["claude", "pi"]) writeFakeCli(bin, kind);
});
afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  rmSync(bin, { recursive: true, force: true });
});

e2eTest("a claude stage on a pool worker: binary and extra args from config, usage in show", async () => {
  const home = makeTempDir("atomic-cli-home-");
  const dir = makeTempDir("atomic-cli-dir-");
  writeFileSync(join(home, "config.json"), JSON.stringify({ runners: { claude: { path: join(bin, "fake-claude"), args: ["--permission-mode", "acceptEdits"] } } }));
  const env = { FAKE_AGENT_DIR: dir };
  // The stage runs in its default sandbox: the fake's log directory is its cwd, the one place it may write.
  const r = await runAtomic(["run", join(FIX, "agent.ts"), "--workers", "1", "--json", "--input", "runner=claude", "--input", "prompt=review it"], { home, cwd: dir, env });
  expect(r.code).toBe(0);
  const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
  expect(result.outputs.text).toBe("Done: review it");
  expect(result.outputs.usage).toMatchObject({ inputTokens: 10, cacheReadTokens: 3000, cacheWriteTokens: 200, outputTokens: 50, costMicroUsd: 12300 });
  const argv = JSON.parse(readFileSync(join(dir, "log.jsonl"), "utf8").split("\n")[0]!).argv as string[];
  expect(argv.slice(-2)).toEqual(["--permission-mode", "acceptEdits"]);
  expect(argv).toEqual(expect.arrayContaining(["--model", "fake-model"]));
  const show = await runAtomic(["show", result.runId], { home });
  expect(show.stdout).toMatch(/usage\s+10 in \+ 3,000 cached \+ 200 cache writes, 50 out, 2 turns, \$0\.0123/);
});

e2eTest("a CLI at a version the tests have not covered: one warning line at the start of the run, naming the tested version, and in show", async () => {
  const home = makeTempDir("atomic-cli-home-");
  const dir = makeTempDir("atomic-cli-dir-");
  // The fake claude installed as npm installs Claude Code: node_modules/.bin/claude -> the package, whose package.json says its version.
  const pkg = join(dir, "node_modules", "@anthropic-ai", "claude-code");
  mkdirSync(pkg, { recursive: true });
  mkdirSync(join(dir, "node_modules", ".bin"));
  writeFileSync(join(pkg, "package.json"), JSON.stringify({ name: "@anthropic-ai/claude-code", version: "2.0.1" }));
  renameSync(writeFakeCli(dir, "claude"), join(pkg, "cli"));
  symlinkSync(join(pkg, "cli"), join(dir, "node_modules", ".bin", "claude"));
  writeFileSync(join(home, "config.json"), JSON.stringify({ runners: { claude: { path: join(dir, "node_modules", ".bin", "claude") } } }));
  const r = await runAtomic(["run", join(FIX, "two-agents.ts"), "--workers", "1"], { home, cwd: dir, env: { FAKE_AGENT_DIR: dir } });
  const said = "the claude CLI here is version 2.0.1, which atomic's tests have not covered (tested: 2.1.197, 2.1.332";
  // One line on stderr for the two stages, before anything else is said there.
  expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: `warning: ${said}); its usage figures and events may differ\n` });
  const json = await runAtomic(["run", join(FIX, "two-agents.ts"), "--workers", "1", "--json"], { home, cwd: dir, env: { FAKE_AGENT_DIR: dir } });
  expect(json.stderr).toBe(""); // --json: the warning is an event of the stream
  const events = json.stdout.trim().split("\n").map((l) => JSON.parse(l));
  expect(events.filter((e) => e.type === "warning").map((e) => e.message.slice(0, said.length))).toEqual([said]);
  // The warning comes before the first stage starts.
  expect(events.findIndex((e) => e.type === "warning")).toBeLessThan(events.findIndex((e) => e.type === "step_started"));
  const runId = JSON.parse(json.stdout.trim().split("\n").at(-1)!).runId;
  const show = await runAtomic(["show", runId], { home });
  expect(show.stdout.split(said).length - 1).toBe(1); // on the first stage of the CLI
});

e2eTest("doctor: which runners are usable here and why not", async () => {
  const home = makeTempDir("atomic-doctor-home-");
  writeFileSync(join(home, "config.json"), JSON.stringify({ runner: "claude", model: "m", runners: { claude: { path: join(bin, "fake-claude") }, pi: { path: "/nonexistent/pi" } } }));
  const env = { PATH: "/usr/bin:/bin", OPENAI_API_KEY: "", ATOMIC_OPENAI_BASE_URL: "" };
  const r = await runAtomic(["doctor"], { home, env });
  expect(r.code).toBe(0); // the default runner (claude) is usable
  expect(r.stdout).toMatch(/default\s+runner claude, model m/);
  expect(r.stdout).toMatch(/ok\s+shell/);
  expect(r.stdout).toMatch(/ok\s+claude\s+\S*fake-claude \(fake-claude 1\.0\.0\)/);
  expect(r.stdout).toMatch(/no\s+openai\s+the openai runner needs an API key/);
  expect(r.stdout).toMatch(/no\s+codex\s+the codex runner needs the program "codex", which is not on PATH/);
  expect(r.stdout).toContain('the pi runner needs the program "/nonexistent/pi"');
  expect(r.stdout).toContain("hint: install Codex");
  const json = JSON.parse((await runAtomic(["doctor", "--json"], { home, env })).stdout);
  expect(json.defaultRunner).toBe("claude");
  expect(json.runners.find((x: { runner: string }) => x.runner === "openai").usable).toBe(false);
  // The home's file, then the suite's own ATOMIC_CONFIG (test/helpers/atomic.ts), read last.
  expect(json.configFiles).toEqual([join(home, "config.json"), expect.stringMatching(/test\/helpers\/test-config\.json$/)]);
  // The default runner unusable: exit 1.
  writeFileSync(join(home, "config.json"), JSON.stringify({ runner: "codex" }));
  expect((await runAtomic(["doctor"], { home, env })).code).toBe(1);
  // A broken config file is one clear error.
  writeFileSync(join(home, "config.json"), "{ not json");
  const bad = await runAtomic(["doctor"], { home, env });
  expect(bad.code).toBe(2);
  expect(bad.stderr).toContain(`the config file ${join(home, "config.json")} is not valid JSON`);
});

e2eTest("malformed budget flags are usage errors; nothing runs", async () => {
  const home = makeTempDir("atomic-flags-home-");
  for (const [flag, value, text] of [
    ["--max-cost", "lots", "--max-cost must be an amount of US dollars"],
    ["--max-tokens", "1.5", "--max-tokens must be a whole number"],
    ["--max-duration", "soon", "--max-duration must be a duration like 90s, 15m or 2h"],
  ] as const) {
    const r = await runAtomic(["run", join(FIX, "agent.ts"), flag, value], { home });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(text);
  }
  expect((await runAtomic(["runs", "--json"], { home })).stdout.trim()).toBe("");
});

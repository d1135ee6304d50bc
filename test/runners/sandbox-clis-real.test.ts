/**
 * The real claude, codex and gemini CLIs (test/agents) inside a stage
 * sandbox (`sandbox: true`, or the default of an agent stage: network "provider"), through dist/atomic and real bubblewrap, against their fake providers on the
 * host's loopback (reached through atomic's provider gate). Each fake
 * scripts one shell tool call of a probe: read a planted key in the CLI's
 * ~/.ssh, another CLI's auth file and a file of the atomic home, write outside the cwd (directly and
 * through a symlink in the cwd that points out), connect to a loopback
 * server that is not the provider, leave a daemonized process behind, then
 * do the stage's work in the cwd. The probe's output, sent back to the fake as
 * the tool's result, says each escape was refused and the work was done;
 * the key never reaches the provider. The same probe with `sandbox: "off"`
 * reads the key (the probe is not vacuous). claude's own permission
 * check refuses that probe's shell as obfuscated (a pipe into tr), so
 * claude runs a plain one (the same escapes, one a line) with the permission atomic gives for
 * `tools: ["bash"]` (--allowedTools Bash), its outcomes read from the
 * tool_result block alone; unsandboxed, the same lines read the key, write
 * through the link and reach the port (the daemonized sleep is ended then
 * by the runner's own cleanup, which finds it by the stage's marker). claude inside a sandbox besides: its run tools
 * through its MCP server (run-tools-real.test.ts) and its sessions
 * (sessions-real.test.ts); opencode: chat-agents-real.test.ts; pi:
 * sandbox-pi.test.ts.
 */

import { afterAll, expect } from "bun:test";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { agentTest } from "../helpers/agents.ts";
import { claudeHome, codexHome, geminiHome } from "../helpers/agent-homes.ts";
import { say, shell, startFakeResponses } from "../helpers/fake-responses.ts";
import { say as geminiSay, shell as geminiShell, startFakeGemini } from "../helpers/fake-gemini.ts";
import { startFakeAnthropic, text as claudeText, toolUse } from "../helpers/fake-anthropic.ts";
import { realStages, runStage, type RealStage } from "../helpers/real-agent-stage.ts";
import { pidsRunning } from "../helpers/processes.ts";

/**
 * What a world leaves to end: its loopback server, a daemonized sleep of a probe that got out. Ended after the
 * file's tests, not after each: the tests run concurrently, and an afterEach of one would stop another's server
 * while its probe runs (making "cannot reach the port" hold for the wrong reason).
 */
const closers: (() => void)[] = [];
afterAll(() => {
  for (const close of closers.splice(0)) close();
});

const KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nplanted-sandbox-key\n-----END OPENSSH PRIVATE KEY-----\n";

/**
 * Plants the key, another CLI's auth file (`otherAuth`, under the home) and a secret of the atomic home; the probe
 * that tries them, writes outside the cwd, then works.
 */
function world(s: RealStage<unknown>, otherAuth: string) {
  const home = s.h.env.HOME!;
  mkdirSync(join(home, ".ssh"), { recursive: true });
  writeFileSync(join(home, ".ssh", "id_ed25519"), KEY);
  mkdirSync(join(home, otherAuth, ".."), { recursive: true });
  writeFileSync(join(home, otherAuth), '{"token":"other-cli-token"}\n');
  writeFileSync(join(s.h.home, "planted-secret"), "atomic-home-secret\n");
  const outside = join(s.h.dir, "outside");
  mkdirSync(outside);
  symlinkSync(outside, join(s.cwd, "link-out"));
  let visits = 0;
  const other = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => (visits++, new Response("reached")) });
  const marker = String(6_000_000 + Math.floor(Math.random() * 1_000_000));
  closers.push(() => {
    other.stop(true);
    for (const pid of pidsRunning(["sleep", marker])) process.kill(pid, "SIGKILL");
  });
  // Each outcome is printed in capitals and lowered by tr, so what the CLI sends back (the tool's result, in
  // lower case) is told apart from the command itself (which it sends back too).
  const probe = `{ ${[
    `(cat "$HOME/.ssh/id_ed25519" 2>/dev/null && echo SSH=READ || echo SSH=DENIED)`,
    `(cat "${s.h.home}/planted-secret" >/dev/null 2>&1 && echo ATOMIC_HOME=READ || echo ATOMIC_HOME=DENIED)`,
    `(cat "$HOME/${otherAuth}" >/dev/null 2>&1 && echo OTHER_AUTH=READ || echo OTHER_AUTH=DENIED)`,
    `(echo x > "${outside}/escaped" 2>/dev/null && echo OUTSIDE=WRITTEN || echo OUTSIDE=DENIED)`,
    `(echo x > link-out/via-link 2>/dev/null && echo LINK=WRITTEN || echo LINK=DENIED)`,
    `(curl -s -m 5 -o /dev/null --noproxy '*' http://127.0.0.1:${other.port}/ && echo OTHER_PORT=REACHED || echo OTHER_PORT=DENIED)`,
    `(setsid sleep ${marker} >/dev/null 2>&1 < /dev/null &)`,
    `(echo done > result.txt && echo WORK=DONE)`,
  ].join("; ")}; } | tr A-Z a-z`;
  return {
    probe,
    otherPort: other.port,
    marker,
    visits: () => visits,
    check(said: string) {
      for (const seen of ["ssh=denied", "atomic_home=denied", "other_auth=denied", "outside=denied", "link=denied", "other_port=denied", "work=done"]) expect(said).toContain(seen);
      expect(said).not.toContain("planted-sandbox-key");
      expect(said).not.toContain("other-cli-token");
      expect(existsSync(join(outside, "escaped"))).toBe(false);
      expect(existsSync(join(outside, "via-link"))).toBe(false);
      expect(visits).toBe(0);
      // the stage has ended, its PID namespace with it: the daemonized sleep too
      expect(pidsRunning(["sleep", marker])).toEqual([]);
      expect(readFileSync(join(s.cwd, "result.txt"), "utf8")).toBe("done\n");
    },
  };
}

/** What the CLI sent the provider after the tool ran (the tool's result among it). */
const secondCall = (s: RealStage<unknown>) => JSON.stringify(s.fake.calls[1]!.body);

const codex = realStages(startFakeResponses, codexHome, { runner: "codex" });
const gemini = realStages(startFakeGemini, geminiHome, { runner: "gemini", model: "gemini-2.5-flash" });
const claude = realStages(startFakeAnthropic, claudeHome, { runner: "claude" });

agentTest("codex in a sandbox: its shell cannot read ~/.ssh, another CLI's auth file nor the atomic home, write outside the cwd (directly or through a symlink), reach another loopback port, nor leave a process behind; its work succeeds; unsandboxed it reads the key", async () => {
  const s = await codex();
  const w = world(s, ".claude/.credentials.json");
  s.fake.push(shell(w.probe), say("probed"));
  const { outputs } = await runStage(s, { prompt: "probe", sandbox: "true" });
  expect(outputs).toMatchObject({ status: "completed", text: "probed" });
  w.check(secondCall(s));
  // the probe is not vacuous: with sandbox "off" the same command reads the key
  s.fake.push(shell(`cat "$HOME/.ssh/id_ed25519"`), say("read"));
  const off = await runStage(s, { prompt: "read it", sandbox: JSON.stringify("off") });
  expect(off.outputs.status).toBe("completed");
  expect(JSON.stringify(s.fake.calls[3]!.body)).toContain("planted-sandbox-key");
  s.fake.assertOnlyFake();
});

agentTest("gemini in a sandbox: its shell tool cannot read ~/.ssh, another CLI's auth file nor the atomic home, write outside the cwd (directly or through a symlink), reach another loopback port, nor leave a process behind; its work succeeds", async () => {
  const s = await gemini();
  const w = world(s, ".codex/auth.json");
  s.fake.push(geminiShell(w.probe), geminiSay("probed"));
  const { outputs } = await runStage(s, { prompt: "probe", tools: JSON.stringify(["read", "bash"]), sandbox: "true" });
  expect(outputs).toMatchObject({ status: "completed", text: "probed" });
  w.check(secondCall(s));
  s.fake.assertOnlyFake();
});

agentTest("claude in its default sandbox (no sandbox option): its Bash tool cannot read ~/.ssh, another CLI's auth file nor the atomic home, write outside the cwd (directly or through a symlink), reach another loopback port, nor leave a process behind; its work succeeds; unsandboxed it reads the key", async () => {
  const s = await claude();
  const w = world(s, ".codex/auth.json"); // the planted key, codex's auth file and the secret, the directory outside and its link, the other port, the marker
  const outside = join(s.h.dir, "outside");
  // One command a line, no pipe: claude's own check lets these run under --allowedTools Bash. The link is written
  // from inside it: claude 2.1.332 refuses a path that resolves through a symlink out of the cwd before running
  // anything ("... resolves through a symlink to ..., which is outside the allowed working directories").
  const probe = [
    `cat "$HOME/.ssh/id_ed25519" && echo SSH=READ || echo SSH=DENIED`,
    `cat "${s.h.home}/planted-secret" && echo ATOMIC_HOME=READ || echo ATOMIC_HOME=DENIED`,
    `cat "$HOME/.codex/auth.json" && echo OTHER_AUTH=READ || echo OTHER_AUTH=DENIED`,
    `echo x > "${outside}/escaped" && echo OUTSIDE=WRITTEN || echo OUTSIDE=DENIED`,
    `(cd link-out && echo x > via-link) && echo LINK=WRITTEN || echo LINK=DENIED`,
    `curl -sS -m 30 -o /dev/null --noproxy 127.0.0.1 http://127.0.0.1:${w.otherPort}/ && echo OTHER_PORT=REACHED || echo OTHER_PORT=DENIED`,
    `nohup setsid sleep ${w.marker} > /dev/null 2>&1 < /dev/null & echo BACKGROUND=STARTED`,
    `echo done > result.txt && echo WORK=DONE`,
  ].join("\n");
  s.fake.push(toolUse("Bash", { command: probe, description: "probe" }), claudeText("probed"));
  const { outputs } = await runStage(s, { prompt: "probe", tools: JSON.stringify(["bash"]) });
  expect(outputs).toMatchObject({ status: "completed", text: "probed" });
  const result = toolResult(s, 1);
  for (const seen of ["SSH=DENIED", "ATOMIC_HOME=DENIED", "OTHER_AUTH=DENIED", "OUTSIDE=DENIED", "LINK=DENIED", "OTHER_PORT=DENIED", "BACKGROUND=STARTED", "WORK=DONE"]) expect(result).toContain(seen);
  expect(JSON.stringify(s.fake.calls.map((c) => c.body))).not.toContain("planted-sandbox-key");
  expect(JSON.stringify(s.fake.calls.map((c) => c.body))).not.toContain("other-cli-token");
  expect(existsSync(join(outside, "escaped"))).toBe(false);
  expect(existsSync(join(outside, "via-link"))).toBe(false);
  expect(w.visits()).toBe(0);
  // the stage has ended, its PID namespace with it: the daemonized sleep too
  expect(pidsRunning(["sleep", w.marker])).toEqual([]);
  expect(readFileSync(join(s.cwd, "result.txt"), "utf8")).toBe("done\n");
  // the probe is not vacuous: with sandbox "off" the same command reads the key
  s.fake.push(toolUse("Bash", { command: probe, description: "probe" }), claudeText("read"));
  const off = await runStage(s, { prompt: "probe again", tools: JSON.stringify(["bash"]), sandbox: JSON.stringify("off") });
  expect(off.outputs.status).toBe("completed");
  expect(toolResult(s, 3)).toContain("planted-sandbox-key");
  // (unsandboxed, the runner's own cleanup ends the daemonized sleep: agent-process.ts finds it by the stage's marker)
  for (const seen of ["SSH=READ", "OTHER_AUTH=READ", "LINK=WRITTEN", "OTHER_PORT=REACHED", "BACKGROUND=STARTED"]) expect(toolResult(s, 3)).toContain(seen);
  expect(existsSync(join(outside, "escaped"))).toBe(true);
  expect(w.visits()).toBe(1);

  s.fake.assertOnlyFake();
});

/** The text of the tool_result block claude sent in its `call`-th request (its tool's output alone, not the command). */
function toolResult(s: RealStage<unknown>, call: number): string {
  const blocks = (s.fake.calls[call]!.body as { messages: { content: unknown }[] }).messages.at(-1)!.content as { type: string; content?: unknown }[];
  return JSON.stringify(blocks.find((b) => b.type === "tool_result")?.content ?? "");
}

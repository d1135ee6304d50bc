/**
 * A real agent CLI inside the sandbox: pi (test/agents, the cheapest to
 * start) runs whole inside bubblewrap with `network: "provider"`. It
 * reaches the fake provider on the host's loopback through atomic's gate,
 * keeps its session in its artifact directory, and its own bash tool
 * (scripted by the fake) meets the same walls as a shell stage: no planted
 * key, no atomic home, no write outside the cwd, no other loopback port,
 * no process left behind; its work in the cwd succeeds.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { agentTest } from "../helpers/agents.ts";
import { runAtomic } from "../helpers/atomic.ts";
import { chatAgentSetup, MODEL } from "../helpers/chat-agents.ts";
import { startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, fixture } from "../e2e/support.ts";
import { sandboxWorld } from "../helpers/sandbox-world.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

agentTest("pi runs whole inside the sandbox: the provider is reached, its bash tool is contained, its session is kept", async () => {
  const w = sandboxWorld();
  const fake = await startFakeOpenAI((req) => (req.body.messages.some((m) => m.role === "tool") ? text("finished") : toolCall("bash", { command: w.probe })));
  try {
    const pi = chatAgentSetup("pi", fake.url);
    writeFileSync(join(w.home, "config.json"), readFileSync(join(pi.home, "config.json")));
    const r = await runAtomic(
      ["run", fixture("sandboxed.ts"), "--json", "--workers", "1", "--input", "prompt=probe", "--input", "runner=pi", "--input", `model=${MODEL}`, "--input", `sandbox=${JSON.stringify({ network: "provider" })}`],
      { home: w.home, cwd: w.cwd, env: { ...pi.env, HOME: w.user }, timeoutMs: 300_000 },
    );
    const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
    expect(result.outputs).toMatchObject({ status: "completed", text: "finished" });
    const tool = fake.requests.flatMap((q) => q.body.messages).find((m) => m.role === "tool");
    const said = JSON.stringify(tool?.content);
    for (const seen of ["SSH=denied", "ATOMIC_HOME=denied", "SYSTEM=denied", "OTHER_PORT=denied", "WORK=done"]) expect(said).toContain(seen);
    expect(w.escaped()).toEqual([]);
    expect(w.visits()).toBe(0);
    expect(w.leftovers()).toEqual([]);
    expect(readFileSync(join(w.cwd, "result.txt"), "utf8")).toBe("done\n");
    // pi wrote its session where atomic keeps it (the attempt's artifact directory, writable inside)
    const shown = JSON.parse((await runAtomic(["show", result.runId, "--json"], { home: w.home, env: { HOME: w.user } })).stdout);
    const step = shown.steps.find((x: { name: string }) => x.name === "work");
    expect(existsSync(join(step.artifactDir, "pi-session.jsonl"))).toBe(true);
  } finally {
    w.close();
    await fake.close();
  }
});

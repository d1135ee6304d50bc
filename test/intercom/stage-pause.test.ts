/**
 * Per-stage pause through the real binary, on the worker pool: `atomic pause
 * RUN STAGE` on a stage that has not started holds it at its start; on a
 * running openai stage it lets the turn in flight end (its tool answered)
 * and makes no next model call until `atomic unpause RUN STAGE`. Each wait
 * is shown by `show` (journal state, waited on, never slept on). Bad input:
 * pause of a finished stage, unpause of a stage that is not paused, a
 * typo'd name, a pattern: one sentence and a hint, exit 2.
 */

import { afterEach, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { expectOneSentenceError, parseNdjson, startedRunId } from "../e2e/support.ts";
import { cleanupHomes, newHome } from "./support.ts";
import { startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "stage-pause.ts");

afterEach(async () => {
  await killSpawned();
  await cleanupHomes();
});

interface Waiting {
  name: string;
  reason: string;
}

test("pause RUN STAGE: a stage not started waits at its start; a running openai stage ends its turn and waits; unpause lets each go on", async () => {
  const home = newHome();
  const out = join(home, "out");
  Bun.spawnSync(["mkdir", "-p", out]);
  let release!: () => void;
  const firstHeld = new Promise<void>((resolve) => (release = resolve));
  const server = await startFakeOpenAI((_req, i) => (i === 0 ? toolCall("list", { path: "." }, { hold: firstHeld }) : text("done")));
  try {
    const env = { OUT_DIR: out, ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const cli = (args: string[]) => runAtomic(args, { home, env });
    const waiting = async (id: string): Promise<Waiting[]> => (JSON.parse((await cli(["show", id, "--json"])).stdout) as { waiting?: Waiting[] }).waiting ?? [];
    const proc = spawnAtomic(["run", FIXTURE, "--workers", "1"], { home, env });
    const lines = lineWatcher(proc.stdout);
    const id = startedRunId(await lines.waitFor(/^started run /));

    // "later" has not started: paused, it will wait at its start.
    const later = await cli(["pause", id, "later", "--json"]);
    expect(later.code).toBe(0);
    expect(JSON.parse(later.stdout)).toEqual({ runId: id, stage: "later", control: "pause", acknowledged: true });

    // "agent" is in its first model call: paused, it answers that turn's tool and calls the model no more.
    await server.requestMatching();
    const agent = await cli(["pause", id, "agent"]);
    expect(agent.code).toBe(0);
    expect(agent.stdout).toContain(`stage agent of run ${id} paused`);
    release();
    const held = await waitUntil(async () => (await waiting(id)).find((w) => w.name === "agent"), 30_000, "the agent to hold after its turn");
    expect(held!.reason).toBe(`paused after its turn: atomic unpause ${id} agent`);
    expect(server.requests.length).toBe(1);
    // Only the stage is paused, not the run.
    expect(parseNdjson((await cli(["runs", "--json"])).stdout).find((r) => r.id === id)?.status).toBe("running");

    // Bad input: a typo'd stage, a pattern, unpause of a stage not paused (agent is paused; a typo is refused first).
    const typo = await cli(["unpause", id, "agnet"]);
    expect(typo.code).toBe(2);
    expect(expectOneSentenceError(typo.stderr)).toMatchObject({ message: expect.stringContaining("has no stage agnet"), hint: "did you mean: agent" });
    const pattern = await cli(["pause", id, "ag*"]);
    expect(pattern.code).toBe(2);
    expect(expectOneSentenceError(pattern.stderr).message).toContain("takes one stage's path, not a pattern");

    expect((await cli(["unpause", id, "agent"])).code).toBe(0);
    // The agent goes on (its second call answers), then "later" reaches its start and waits there.
    const atStart = await waitUntil(async () => (await waiting(id)).find((w) => w.name === "later"), 30_000, "later to wait at its start");
    expect(atStart!.reason).toBe(`the stage is paused: atomic unpause ${id} later`);
    expect(server.requests.length).toBe(2);
    expect(existsSync(join(out, "later"))).toBe(false);
    expect((await waiting(id)).map((w) => w.name)).toEqual(["later"]);

    const finished = await cli(["pause", id, "agent"]);
    expect(finished.code).toBe(2);
    expect(expectOneSentenceError(finished.stderr)).toMatchObject({ message: `stage agent of run ${id} has finished (completed).`, hint: expect.stringContaining("nothing to pause") });
    const notPaused = await cli(["unpause", id, "agent"]);
    expect(notPaused.code).toBe(2);
    expect(expectOneSentenceError(notPaused.stderr)).toMatchObject({ message: `stage agent of run ${id} is not paused.`, hint: `pause it with: atomic pause ${id} agent` });

    expect((await cli(["unpause", id, "later"])).code).toBe(0);
    expect(await proc.exited).toBe(0);
    expect(readFileSync(join(out, "later"), "utf8")).toBe("ran\n");
    const after = await cli(["pause", id, "later"]);
    expect(after.code).toBe(2);
    expect(expectOneSentenceError(after.stderr).message).toContain("is not running");
  } finally {
    await server.close();
  }
}, 120_000);

test("a paused stage stays paused across kill -9 of the root and a resume", async () => {
  const { out, server, cli, env, home, id } = await pausedThenKilled((id) => ["pause", id, "later"]);
  try {
    const resumed = spawnAtomic(["resume", id], { home, env });
    const atStart = await waitUntil(async () => {
      const report = JSON.parse((await cli(["show", id, "--json"])).stdout) as { waiting?: Waiting[] };
      return report.waiting?.find((w) => w.name === "later");
    }, 30_000, "later to wait at its start after the resume");
    expect(atStart!.reason).toBe(`the stage is paused: atomic unpause ${id} later`);
    expect(existsSync(join(out, "later"))).toBe(false);
    expect((await cli(["unpause", id, "later"])).code).toBe(0);
    expect(await resumed.exited).toBe(0);
    expect(readFileSync(join(out, "later"), "utf8")).toBe("ran\n");
  } finally {
    await server.close();
  }
}, 120_000);

test("a paused run stays paused across kill -9 of the root and a resume", async () => {
  const { out, server, cli, env, home, id } = await pausedThenKilled((id) => ["pause", id]);
  try {
    const resumed = spawnAtomic(["resume", id, "--json"], { home, env });
    const lines = lineWatcher(resumed.stdout);
    // The resumed drive closes its gate again before any step starts, and says so.
    await lines.waitFor(/"type":"paused"/);
    expect(server.requests.length).toBe(1);
    expect((await cli(["runs"])).stdout.split("\n").find((l) => l.startsWith(id))).toMatch(/\bpaused\b/);
    expect((await cli(["unpause", id])).code).toBe(0);
    expect(await resumed.exited).toBe(0);
    expect(readFileSync(join(out, "later"), "utf8")).toBe("ran\n");
    expect(server.requests.length).toBe(2);
  } finally {
    await server.close();
  }
}, 120_000);

/**
 * A run of the fixture whose first model call never answers (a resumed drive's does), paused by `pause(id)`
 * and then its root killed with SIGKILL: what the resume tests start from. The caller closes `server`.
 */
async function pausedThenKilled(pause: (id: string) => string[]) {
  const home = newHome();
  const out = join(home, "out");
  Bun.spawnSync(["mkdir", "-p", out]);
  const server = await startFakeOpenAI((_req, i) => (i === 0 ? { hold: new Promise(() => {}) } : text("done")));
  const env = { OUT_DIR: out, ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
  const cli = (args: string[]) => runAtomic(args, { home, env });
  try {
    const proc = spawnAtomic(["run", FIXTURE, "--workers", "1"], { home, env });
    const id = startedRunId(await lineWatcher(proc.stdout).waitFor(/^started run /));
    await server.requestMatching();
    expect((await cli(pause(id))).code).toBe(0);
    proc.kill("SIGKILL");
    await proc.exited;
    return { home, out, server, env, cli, id };
  } catch (e) {
    await server.close();
    throw e;
  }
}

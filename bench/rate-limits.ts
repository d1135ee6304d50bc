/**
 * Shared rate limits (runners/rate-limits.ts): 20 openai-runner stages at
 * once, on 4 pool workers, against a fake provider that allows 5 requests
 * per second (a fixed one-second window; beyond it, 429 with Retry-After:
 * the seconds left in the window). Each stage makes three calls (two
 * `list` tool calls, then its answer); admission
 * is opened up so that all start at once. Baseline, in the same run: the
 * same stages with the shared store unwritable (each stage finds the limit
 * alone, and they collide again after every back-off). With sharing, a 429
 * seen by one makes all wait, and after the back-off they go one at a time
 * for a while. Target: at most 1.2 × 20 = 24 responses 429 in all (the
 * ratio printed is 429s per stage), and no stage fails.
 */

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startFakeOpenAI, text, toolCall } from "../test/helpers/fake-openai.ts";
import { WORKFLOWS, atomicBin, binaryEnv, fmt, spawnTracked, tempDir, type Bench, type Result } from "./lib.ts";

const STAGES = 20;
const PER_SECOND = 5;
const TARGET = 1.2;
const CALLS = 3;

const bench: Bench = {
  name: "rate-limits",
  title: `${STAGES} openai stages against a provider allowing ${PER_SECOND} requests/s: 429s per stage`,
  async run(): Promise<Result[]> {
    let windowStart = 0;
    let inWindow = 0;
    let refused = 0;
    let served = 0;
    const server = await startFakeOpenAI((req) => {
      // a fixed one-second window of PER_SECOND requests
      const now = Date.now();
      if (now - windowStart >= 1000) {
        windowStart = now;
        inWindow = 0;
      }
      if (++inWindow > PER_SECOND) {
        refused++;
        const left = Math.max(1, Math.ceil((windowStart + 1000 - now) / 1000));
        return { status: 429, headers: { "retry-after": String(left) }, body: JSON.stringify({ error: { message: "rate limit: 5 requests per second" } }) };
      }
      served++;
      // CALLS model calls per stage: list, list, then the answer
      return req.body.messages.filter((m) => m.role === "tool").length < CALLS - 1 ? toolCall("list", {}) : text("ok");
    });
    const runOnce = async (shared: boolean) => {
      windowStart = 0;
      inWindow = 0;
      refused = 0;
      served = 0;
      const home = tempDir("atomic-bench-rl-");
      // Admission would pace the stages (one a second, four at a time): all 20 start at once here.
      writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { maxSessionsPerRun: STAGES, maxSessionsPerUser: STAGES, paceMs: 0, maxLoadPerCpu: 1000, minFreeMemoryMb: 0, slotsDir: join(home, "slots") } }));
      // The baseline: the store cannot be written (a file where its directory would be), so nothing is shared.
      if (!shared) writeFileSync(join(home, "rate-limits"), "");
      const started = Date.now();
      const proc = spawnTracked([atomicBin(), "run", join(WORKFLOWS, "rate-limited.ts"), "--json", "--workers", "4", "--input", `stages=${STAGES}`], {
        env: binaryEnv(home, { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-bench" }),
        stdout: "pipe",
        stderr: "pipe",
      });
      const out = await new Response(proc.stdout as ReadableStream).text();
      const code = await proc.exited;
      let outputs: { completed?: number; failed?: string[] } = {};
      try {
        outputs = (JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as { outputs?: typeof outputs }).outputs ?? {};
      } catch {
        // reported below as a failure
      }
      return { refused, served, code, outputs, wall: Date.now() - started };
    };
    try {
      const base = await runOnce(false);
      const r = await runOnce(true);
      const ratio = r.refused / STAGES;
      const ok = r.code === 0 && r.outputs.completed === STAGES && ratio <= TARGET;
      const describe = (x: typeof r) => `stages completed: ${x.outputs.completed ?? 0} of ${STAGES}${x.outputs.failed?.length ? `; failed: ${x.outputs.failed.join(", ")}` : ""}; exit ${x.code}; ${x.served} served; wall ${fmt(x.wall / 1000)} s`;
      return [
        {
          bench: "rate-limits",
          label: `429 responses for ${STAGES} concurrent stages, limits shared`,
          value: r.refused,
          unit: "responses",
          baseline: { label: "nothing shared (each stage alone)", value: base.refused, unit: "responses" },
          ratio: { value: ratio, meaning: "429 responses per stage, limits shared" },
          target: { text: `ratio <= ${TARGET} and every stage completes`, ok },
          notes: [`shared: ${describe(r)}`, `baseline: ${describe(base)}; ${fmt(base.refused / STAGES, 2)} per stage`],
        },
      ];
    } finally {
      await server.close();
    }
  },
};

export default bench;

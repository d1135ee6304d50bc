/**
 * GET /api/runs/:id/stream through the real binary carries the run's live
 * events too: a stage on a pool worker streams its model deltas (through
 * the broker, intercom/live.ts) to a client of `atomic serve` following the
 * whole run, as `event: live` after the catch-up's `ready`, beside the
 * journal events (which alone carry ids). After `atomic serve` restarts, a
 * client resuming the run's stream with Last-Event-ID from the middle gets
 * exactly the events after it, none missed and none twice.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { killSpawned } from "../helpers/atomic.ts";
import { inOrder, startFakeOpenAI } from "../helpers/fake-openai.ts";
import { sseReader, type SseMessage } from "../status/support.ts";
import { get, serve, startChat } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await killSpawned();
  await cleanupNow();
});

/** The SSE ids of the messages that carry one (the journal's; not `ready`, not live batches). */
const cursors = (ms: SseMessage[]) => ms.filter((m) => m.id && m.event !== "ready").map((m) => m.id!);
const isEnd = (m: SseMessage) => m.event === "journal" && (JSON.parse(m.data) as { type: string; payload: { to?: string } }).payload?.to === "completed";

e2eTest("a run's stream: its stages' live deltas from a pool worker after ready, without ids, beside its journal events; resumed with Last-Event-ID after a serve restart", async () => {
  const gate = Promise.withResolvers<void>();
  const fake = await startFakeOpenAI(inOrder({ text: ["Hel", "lo ", "world"], hold: gate.promise, paceMs: 150, usage: { prompt: 10, completion: 3 } }));
  const home = makeTempDir("atomic-run-live-home-");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  try {
    const served = await serve(home);
    const run = await startChat(home, env, ["--workers", "1"]);
    await fake.requestMatching();
    const res = await get(served, `/api/runs/${run.runId}/stream`);
    expect(res.status).toBe(200);
    const sse = sseReader(res.body!);
    const first = await sse.until((m) => m.event === "ready");
    expect(first.some((m) => m.event === "live")).toBe(false);
    gate.resolve();
    const rest = await sse.until(isEnd, 30_000);
    const live = rest.filter((m) => m.event === "live");
    expect(live.every((m) => m.id === undefined || m.id === "")).toBe(true);
    const batches = live.map((m) => JSON.parse(m.data) as { runId: string; path: string; stage: string; events: { type: string; text?: string }[] });
    expect(new Set(batches.map((b) => `${b.runId} ${b.path}`))).toEqual(new Set([`${run.runId} `]));
    const events = batches.flatMap((b) => b.events);
    expect(events.filter((e) => e.type === "text_delta").map((e) => e.text).join("")).toBe("Hello world");
    expect(events.some((e) => e.type === "usage")).toBe(true);
    expect(rest.some((m) => m.event === "journal")).toBe(true);
    expect(await run.proc.exited).toBe(0);
    const seen = cursors([...first, ...rest]);
    await sse.cancel();
    served.proc.kill("SIGTERM");
    await served.proc.exited;

    // `atomic serve` restarts; a client that resumes with Last-Event-ID from the middle gets exactly what came after it.
    const again = await serve(home);
    const stream = async (headers: Record<string, string> = {}) => {
      const reader = sseReader((await get(again, `/api/runs/${run.runId}/stream`, headers)).body!);
      const got = cursors(await reader.until((m) => m.event === "ready"));
      await reader.cancel();
      return got;
    };
    expect(seen.length).toBeGreaterThan(2);
    const all = await stream();
    expect(all.slice(0, seen.length)).toEqual(seen);
    const cut = seen[Math.floor(seen.length / 2)]!;
    expect(await stream({ "Last-Event-ID": cut })).toEqual(all.slice(all.indexOf(cut) + 1));
    again.proc.kill("SIGTERM");
    await again.proc.exited;
  } finally {
    await fake.close();
  }
});

/**
 * GET /api/runs/:id/stages/:path/stream through the real binary: a stage on a pool worker streams its model
 * deltas (through the broker, intercom/live.ts) and its journal events to a client of `atomic serve`; after
 * the server restarts, a client resuming with Last-Event-ID gets exactly the journal events after that id.
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

const journalIds = (ms: SseMessage[]) => ms.filter((m) => m.event === "journal").map((m) => Number(m.id));
const liveText = (ms: SseMessage[]) =>
  ms
    .filter((m) => m.event === "live")
    .flatMap((m) => (JSON.parse(m.data) as { events: { type: string; text?: string }[] }).events)
    .filter((e) => e.type === "text_delta")
    .map((e) => e.text)
    .join("");
const isEnd = (m: SseMessage) => m.event === "journal" && (JSON.parse(m.data) as { type: string; payload: { to?: string } }).payload?.to === "completed";

e2eTest("a stage stream: live deltas from a pool worker, journal events, resumed after a serve restart", async () => {
  const gate = Promise.withResolvers<void>();
  const fake = await startFakeOpenAI(inOrder({ text: ["Hel", "lo ", "world"], hold: gate.promise, paceMs: 150, usage: { prompt: 10, completion: 3 } }));
  const home = makeTempDir("atomic-live-home-");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  try {
    const served = await serve(home);
    const run = await startChat(home, env, ["--workers", "1"]);
    await fake.requestMatching();
    const res = await get(served, `/api/runs/${run.runId}/stages/chat/stream`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const sse = sseReader(res.body!);
    const first = await sse.until((m) => m.event === "ready");
    expect(journalIds(first).length).toBeGreaterThan(0); // the stage's start at least
    gate.resolve();
    const rest = await sse.until(isEnd, 30_000);
    expect(liveText(rest)).toBe("Hello world");
    const tools = rest.filter((m) => m.event === "live").flatMap((m) => JSON.parse(m.data).events as { type: string }[]);
    expect(tools.some((e) => e.type === "usage")).toBe(true);
    expect(await run.proc.exited).toBe(0);
    await sse.cancel();
    const seen = journalIds([...first, ...rest]);

    // The server restarts; a client resumes from an id in the middle.
    served.proc.kill("SIGTERM");
    await served.proc.exited;
    const again = await serve(home);
    const full = sseReader((await get(again, `/api/runs/${run.runId}/stages/chat/stream`)).body!);
    const all = journalIds(await full.until((m) => m.event === "ready"));
    await full.cancel();
    expect(all.slice(0, seen.length)).toEqual(seen);
    const cut = seen[Math.floor(seen.length / 2)]!;
    const resumed = sseReader((await get(again, `/api/runs/${run.runId}/stages/chat/stream`, { "Last-Event-ID": String(cut) })).body!);
    const after = journalIds(await resumed.until((m) => m.event === "ready"));
    await resumed.cancel();
    expect(after).toEqual(all.filter((id) => id > cut));
    // A cursor ahead of the journal, and one that is not a seq: 400 with a hint.
    const ahead = await get(again, `/api/runs/${run.runId}/stages/chat/stream`, { "Last-Event-ID": "999999" });
    expect(ahead.status).toBe(400);
    expect(((await ahead.json()) as { error: { message: string } }).error.message).toContain("ahead of the journal");
    const unknown = await get(again, `/api/runs/${run.runId}/stages/nope/stream`);
    expect(unknown.status).toBe(404);
    again.proc.kill("SIGTERM");
    await again.proc.exited;
  } finally {
    await fake.close();
  }
});

/**
 * For the live-event tests: a home with `atomic serve` (its address and token from its first log line), a run of
 * fixtures/chat.ts driven by `atomic run --json` against the fake provider, and SSE reads of the status API.
 */

import { join } from "node:path";
import { expect } from "bun:test";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI } from "../helpers/fake-openai.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { sseReader } from "../status/support.ts";

export const CHAT = join(import.meta.dir, "fixtures", "chat.ts");

export interface Served {
  proc: ReturnType<typeof spawnAtomic>;
  url: string;
  token: string;
}

export async function serve(home: string, env: Record<string, string> = {}): Promise<Served> {
  const proc = spawnAtomic(["--home", home, "--json", "serve", "--port", "0"], { home, env });
  const log = lineWatcher(proc.stdout);
  const first = JSON.parse(await log.waitFor(/"url"/)) as { url: string; tokenFile: string };
  const token = (await Bun.file(first.tokenFile).text()).trim();
  return { proc, url: first.url, token };
}

export function get(s: Served, path: string, headers: Record<string, string> = {}, token = s.token): Promise<Response> {
  return fetch(new URL(path, s.url), { headers: { Authorization: `Bearer ${token}`, ...headers } });
}

/** Starts a run of the chat fixture in the foreground (`--json`); resolves with its id once it started. */
export async function startChat(home: string, env: Record<string, string>, extra: string[] = []) {
  // The stage's cwd: a directory of its own (its list tool shows what is there).
  const proc = spawnAtomic(["--home", home, "--json", "run", CHAT, ...extra], { home, env, cwd: makeTempDir("atomic-live-cwd-") });
  const out = lineWatcher(proc.stdout);
  const line = await out.waitFor(/"runId":"[0-9a-z]+"/);
  return { proc, out, runId: /"runId":"([0-9a-z]+)"/.exec(line)![1]! };
}

/** `atomic attach RUN STAGE --json` from a home of its own and `serve`'s stream of the stage, once each follows it (attached; ready). */
export async function watchStage(served: Served, runId: string, stage: string, env: Record<string, string>, home = makeTempDir("atomic-live-elsewhere-")) {
  const attach = spawnAtomic(["--json", "attach", runId, stage], { home, env });
  const out = lineWatcher(attach.stdout);
  await out.waitFor(/"type":"attached"/, 30_000);
  const res = await get(served, `/api/runs/${runId}/stages/${encodeURIComponent(stage)}/stream`);
  if (res.status !== 200) throw new Error(`the stage stream answered ${res.status}: ${await res.text()}`);
  const sse = sseReader(res.body!);
  await sse.until((m) => m.event === "ready");
  return { attach, out, sse };
}

/** The numbered words of a text, in order ("w00042" → 42). */
const words = (text: string) => [...text.matchAll(/w(\d{5})/g)].map((m) => Number(m[1]));

/**
 * Watchers attaching while the chat stage streams fast see its whole text once, in order: the transcript so far,
 * then live (docs/design/live-events.md, "Marks"). Each model call streams 100 numbered words, one delta each, over
 * 600 ms, and asks for a tool (the turn goes on); the first watcher attaches once the stage streams, each next one
 * once the one before showed live text, and once every one did the next call ends the turn. Then each watcher's
 * transcript and live text, in the order shown, hold every word of the stage's final transcript once, in order.
 * `start` starts the run (with `journal`, if any, as ATOMIC_JOURNAL) and says where the watchers run.
 */
export async function watchersSeeEveryWordOnce(
  start: (env: Record<string, string>) => Promise<{ run: Awaited<ReturnType<typeof startChat>>; watcherHome: string; watcherEnv?: Record<string, string> }>,
  journal?: string,
): Promise<void> {
  const WATCHERS = 3;
  const watchers: { out: ReturnType<typeof lineWatcher>; proc: ReturnType<typeof spawnAtomic> }[] = [];
  let next = 1;
  let allLive = false;
  const fake = await startFakeOpenAI(() => {
    if (allLive) return { text: "All done." };
    const chunk = Array.from({ length: 100 }, () => `w${String(next++).padStart(5, "0")} `);
    return { text: chunk, paceMs: 600, toolCalls: [{ name: "list", arguments: {} }] };
  });
  const env: Record<string, string> = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test", ...(journal ? { ATOMIC_JOURNAL: journal } : {}) };
  try {
    const { run, watcherHome, watcherEnv } = await start(env);
    await fake.requestMatching();
    for (let i = 0; i < WATCHERS; i++) {
      const proc = spawnAtomic(["--json", "attach", run.runId, "chat"], { home: watcherHome, env: { ...env, ...watcherEnv } });
      const out = lineWatcher(proc.stdout);
      watchers.push({ out, proc });
      await out.waitFor(/"type":"text".*w\d{5}/, 60_000);
    }
    allLive = true;
    for (const w of watchers) {
      expect((JSON.parse(await w.out.waitFor(/"type":"ended"/, 60_000)) as { status: string }).status).toBe("completed");
      expect(await w.proc.exited).toBe(0);
    }
    expect(await run.proc.exited).toBe(0);

    // The stage's final transcript (read from a home of its own: over a shared journal, from the artifact store).
    const logs = await runAtomic(["logs", run.runId, "--stage", "chat"], { home: journal ? makeTempDir("atomic-live-third-") : watcherHome, env });
    expect(logs.code).toBe(0);
    const final = words(logs.stdout);
    expect(final).toEqual(Array.from({ length: next - 1 }, (_, i) => i + 1));
    for (const [i, w] of watchers.entries()) {
      const items = w.out.lines.map((l) => JSON.parse(l) as { type: string; text?: string });
      const before = words(items.filter((x) => x.type === "transcript").map((x) => x.text).join(""));
      const live = words(items.filter((x) => x.type === "text").map((x) => x.text).join(""));
      // Attached mid-stream: words from the transcript (every watcher but the first saw live text go by first), the rest live.
      if (i > 0) expect(before.length).toBeGreaterThan(0);
      expect(live.length).toBeGreaterThan(0);
      expect({ watcher: i, words: [...before, ...live] }).toEqual({ watcher: i, words: final });
    }
  } finally {
    for (const w of watchers) w.proc.kill("SIGTERM");
    await fake.close();
  }
}

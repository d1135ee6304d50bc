/**
 * For the live-event tests: a home with `atomic serve` (its address and token from its first log line), a run of
 * fixtures/chat.ts driven by `atomic run --json` against the fake provider, and SSE reads of the status API.
 */

import { join } from "node:path";
import { lineWatcher, spawnAtomic } from "../helpers/atomic.ts";
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

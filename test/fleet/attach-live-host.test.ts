/**
 * Live model deltas of a stage on a worker host reach watchers elsewhere
 * (docs/design/live-events.md, "Worker hosts"): the root runs in one home
 * with no workers of its own, a host (`atomic worker`, its own home) runs
 * the openai stage against the fake provider streaming slowly, `atomic
 * attach --json` runs in a third home and `atomic serve` in the root's.
 * Both see the stage's text deltas while its turn goes on: the provider
 * answers with text and a tool call until the test has seen the text in
 * both places, and only then ends the turn. The attach's lost-host
 * threshold is set below the heartbeat: the live host is never said gone.
 * The host runs in a mount namespace without the root's and the watcher's
 * homes, as on another machine: nothing reaches them but the journal. (A
 * network namespace would add nothing: no TCP runs between host and root
 * but Postgres; the same-machine shortcut to rule out is their brokers'
 * sockets on a shared filesystem.)
 */

import { afterEach, beforeAll, expect, test } from "bun:test";
import { startFakeOpenAI } from "../helpers/fake-openai.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { lineWatcher, spawnAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { serve, startChat, watchStage, watchersSeeEveryWordOnce } from "../live/support.ts";
import { cleanUpHosts, startHost } from "./support.ts";

beforeAll(async () => {
  await testPostgres();
});
afterEach(cleanUpHosts);

test("attach and the stage stream show live deltas of a stage on a worker host before its turn ends", async () => {
  let seen = false;
  // Text and a tool call (the turn goes on) until the test saw the text live; then the turn's last words.
  const fake = await startFakeOpenAI(() => (seen ? { text: "All done." } : { text: ["tick ", "tock "], paceMs: 200, toolCalls: [{ name: "list", arguments: {} }] }));
  const url = await freshDatabase("attach_live");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test", ATOMIC_JOURNAL: url };
  try {
    const home = makeTempDir("atomic-live-root-");
    const elsewhere = makeTempDir("atomic-live-elsewhere-");
    // The host sees neither the root's home nor the watcher's (their brokers' sockets): its deltas cross through the journal only.
    await startHost({ url, id: "faraway", slots: 1, env, hide: [home, elsewhere] });
    const served = await serve(home, env);
    const run = await startChat(home, env, ["--workers", "0"]);
    await fake.requestMatching();

    // A lost-host threshold below the heartbeat counts as its least (two heartbeats): the live host is never said gone.
    const { attach, out, sse } = await watchStage(served, run.runId, "chat", { ...env, ATOMIC_HOST_LOST_MS: "2000" }, elsewhere);

    // Live, not the transcript read at attach: a `text` line, and a `live` SSE message with a text delta.
    const line = JSON.parse(await out.waitFor(/"type":"text".*tick/, 60_000)) as { path: string; text: string };
    expect(line.path).toBe("chat");
    const live = await sse.until(
      (m) => m.event === "live" && (JSON.parse(m.data) as { events: { type: string; text?: string }[] }).events.some((e) => e.type === "text_delta" && e.text?.includes("tick")),
      60_000,
    );
    expect(live.length).toBeGreaterThan(0);
    // The turn has not ended: only now does the provider answer without a tool call.
    expect(out.lines.some((l) => l.includes('"type":"ended"'))).toBe(false);
    seen = true;
    const ended = JSON.parse(await out.waitFor(/"type":"ended"/, 60_000)) as { status: string };
    expect(ended.status).toBe("completed");
    expect(await attach.exited).toBe(0);
    expect(out.lines.filter((l) => l.includes("worker host faraway"))).toEqual([]);
    expect(await run.proc.exited).toBe(0);
    await sse.cancel();
    served.proc.kill("SIGTERM");
    await served.proc.exited;
  } finally {
    await fake.close();
  }
}, 120_000);

test("attach to a stage running on a worker host shows what it said before, then follows it live", async () => {
  let attached = false;
  let calls = 0;
  const shown = Promise.withResolvers<void>();
  const tick = { text: ["tick "], paceMs: 200, toolCalls: [{ name: "list", arguments: {} }] };
  // Its first words and a tool call; its next model call waits until attach has shown them; then a tick and a tool
  // call again (the turn goes on) until attach has shown a tick live.
  const fake = await startFakeOpenAI(() => {
    calls++;
    if (calls === 1) return { text: ["said ", "before ", "attaching"], toolCalls: [{ name: "list", arguments: {} }] };
    if (calls === 2) return { ...tick, hold: shown.promise };
    return attached ? { text: "All done." } : tick;
  });
  const url = await freshDatabase("attach_so_far");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test", ATOMIC_JOURNAL: url };
  try {
    const home = makeTempDir("atomic-live-root-");
    const elsewhere = makeTempDir("atomic-live-elsewhere-");
    await startHost({ url, id: "faraway", slots: 1, env, hide: [home, elsewhere] });
    const run = await startChat(home, env, ["--workers", "0"]);
    // The host shipped the first words to the artifact store (another home's `logs --follow` reads them there).
    const follow = spawnAtomic(["logs", run.runId, "--stage", "chat", "--follow"], { home: makeTempDir("atomic-live-third-"), env });
    await lineWatcher(follow.stdout).waitFor(/said before attaching/, 60_000);
    follow.kill("SIGTERM");
    await follow.exited;

    const attach = spawnAtomic(["--json", "attach", run.runId, "chat"], { home: elsewhere, env: { ...env, ATOMIC_HOST_LOST_MS: "2000" } });
    const out = lineWatcher(attach.stdout);
    // The conversation so far, read when attaching, while the stage still runs on the host.
    const so = JSON.parse(await out.waitFor(/"type":"transcript"/, 30_000)) as { text: string; path: string };
    expect(so.path).toBe("chat");
    expect(so.text).toContain("said before attaching");
    expect(out.lines.some((l) => l.includes('"type":"ended"'))).toBe(false);
    shown.resolve();
    // Then live: a tick relayed from the host after the transcript.
    await out.waitFor(/"type":"text".*tick/, 60_000);
    attached = true;
    const ended = JSON.parse(await out.waitFor(/"type":"ended"/, 60_000)) as { status: string };
    expect(ended.status).toBe("completed");
    expect(await attach.exited).toBe(0);
    expect(await run.proc.exited).toBe(0);
  } finally {
    await fake.close();
  }
}, 120_000);

test("watchers attaching while a worker host's stage streams fast see its whole text once, in order: the transcript so far, then live", async () => {
  await watchersSeeEveryWordOnce(async (env) => {
    const home = makeTempDir("atomic-live-root-");
    const elsewhere = makeTempDir("atomic-live-elsewhere-");
    // The host sees neither the root's home nor the watchers': the transcript comes from the store, live events through the journal.
    await startHost({ url: env.ATOMIC_JOURNAL!, id: "faraway", slots: 1, env, hide: [home, elsewhere] });
    return { run: await startChat(home, env, ["--workers", "0"]), watcherHome: elsewhere, watcherEnv: { ATOMIC_HOST_LOST_MS: "2000" } };
  }, await freshDatabase("attach_join"));
}, 180_000);

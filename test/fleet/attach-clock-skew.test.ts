/**
 * Live deltas of a stage on a worker host whose clock differs from the
 * watchers' (libfaketime on the host: a minute behind, then a minute
 * ahead; docs/design/live-events.md, "Worker hosts"). The root, `atomic
 * serve` and `atomic attach --json` (a third home) run on the true clock;
 * the host runs the openai stage against the fake provider, each turn
 * streaming five numbered words and a tool call until the test has seen
 * enough. Nothing breaks or reorders: attach's words (the transcript so
 * far, then live) and the stage stream's live words come each once, in
 * the provider's order, none left out between the first and the last;
 * attach never says the host is gone (silence is
 * judged by the database's clock); the run completes.
 */

import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { startFakeOpenAI } from "../helpers/fake-openai.ts";
import { fakeClock, removeStaleFaketimeSegments } from "../helpers/faketime.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { serve, startChat, watchStage } from "../live/support.ts";
import { cleanUpHosts, startHost } from "./support.ts";

beforeAll(async () => {
  await testPostgres();
});
afterEach(cleanUpHosts);
afterAll(() => removeStaleFaketimeSegments());

/** The numbered words `w<turn>.<i>` in a text, in order, as turn*10+i. */
const words = (text: string) => [...text.matchAll(/w(\d+)\.(\d) /g)].map((m) => Number(m[1]) * 10 + Number(m[2]));
/** Each word once, each the one after the one before (a turn has five: w3.4 is followed by w4.0). */
function expectInOrder(seen: number[], where: string) {
  expect(seen.length, where).toBeGreaterThan(0);
  const gaps = seen.slice(1).flatMap((w, i) => (w === (seen[i]! % 10 === 4 ? seen[i]! + 6 : seen[i]! + 1) ? [] : [`${seen[i]} then ${w}`]));
  expect(gaps, where).toEqual([]);
}

for (const [who, offset] of [
  ["a minute behind", "-1m"],
  ["a minute ahead", "+1m"],
] as const) {
  test(`a worker host's clock ${who} of the watchers': attach and the stage stream show its live words once each, in order; the host is never said gone`, async () => {
    let stop = false;
    const watching = Promise.withResolvers<void>();
    // Each turn: five numbered words spread over half a second, and a tool call (the turn goes on) until the test
    // has seen enough; the third turn waits until both watchers follow the stage.
    const fake = await startFakeOpenAI((req) => {
      const turn = req.body.messages.filter((m) => m.role === "tool").length;
      if (stop) return { text: "All done." };
      return { text: Array.from({ length: 5 }, (_, i) => `w${turn}.${i} `), paceMs: 500, toolCalls: [{ name: "list", arguments: {} }], hold: turn === 2 ? watching.promise : undefined };
    });
    const url = await freshDatabase("skew");
    const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test", ATOMIC_JOURNAL: url };
    try {
      const home = makeTempDir("atomic-skew-root-");
      const elsewhere = makeTempDir("atomic-skew-elsewhere-");
      // The host sees neither the root's home nor the watcher's (their brokers' sockets): its deltas cross through the journal only.
      await startHost({ url, id: "skewed", slots: 1, env: { ...env, ...fakeClock(offset) }, hide: [home, elsewhere] });
      const served = await serve(home, env);
      const run = await startChat(home, env, ["--workers", "0"]);
      // The stage has streamed for a while on the host before anyone watches.
      await fake.requestMatching((r) => r.body.messages.filter((m) => m.role === "tool").length >= 2);

      const { attach, out, sse } = await watchStage(served, run.runId, "chat", env, elsewhere);
      watching.resolve();
      const streamed: number[] = [];
      // Until both have shown three turns of live words.
      const liveWords = () => out.lines.filter((l) => l.includes('"type":"text"')).flatMap((l) => words((JSON.parse(l) as { text: string }).text));
      await sse.until((m) => {
        if (m.event === "live") for (const e of (JSON.parse(m.data) as { events: { type: string; text?: string }[] }).events) if (e.type === "text_delta" && e.text) streamed.push(...words(e.text));
        return streamed.length >= 15 && liveWords().length >= 15;
      }, 90_000);
      stop = true;
      const ended = JSON.parse(await out.waitFor(/"type":"ended"/, 60_000)) as { status: string };
      expect([ended.status, await attach.exited, await run.proc.exited]).toEqual(["completed", 0, 0]);
      void sse.cancel();
      served.proc.kill("SIGTERM");

      // Attach: every word once, in order, from the first (w0.0): the transcript so far, then live from its mark
      // (docs/design/live-events.md, "Marks"). The stream: from the first word streamed after both watched (w2.0).
      const shown = out.lines.flatMap((l) => {
        const x = JSON.parse(l) as { type: string; text?: string };
        return x.type === "transcript" || x.type === "text" ? words(x.text ?? "") : [];
      });
      expect(shown[0]).toBe(0);
      expectInOrder(shown, "attach's words");
      expect(streamed[0]).toBe(20);
      expectInOrder(streamed, "the stage stream's live words");
      expect(out.lines.filter((l) => /worker host skewed.*gone/.test(l))).toEqual([]);
      // Said once, though the stage's end and its run's came together.
      expect(out.lines.filter((l) => l.includes('"type":"ended"'))).toHaveLength(1);
      await served.proc.exited;
    } finally {
      await fake.close();
    }
  }, 180_000);
}

/**
 * GET /api/runs/:id/stream: the events of a run and of its child runs as
 * server-sent events, resumable with Last-Event-ID (a client that
 * disconnects and reconnects misses none and gets none twice), one shared
 * poller per run, heartbeats, refusal of bad cursors.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { workflow } from "../../src/sdk/index.ts";
import type { RunId } from "../../src/shared/ids.ts";
import type { Journal } from "../../src/journal/journal.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { engineAfterEach, shQuote, waitUntil, withEngine } from "../engine/helpers.ts";
import { journalData, sseReader, statusFixture, type JournalMessage, type SseMessage, type StatusFixture } from "./support.ts";

import { untilExists } from "../helpers/gate.ts";
afterEach(engineAfterEach);

const kid = workflow({
  name: "kid",
  async run(ctx) {
    for (let i = 0; i < 5; i++) await ctx.tool(`k${i}`, i, async () => (await Bun.sleep(8), i));
    return { kid: true };
  },
});

const busy = workflow({
  name: "busy",
  async run(ctx) {
    for (let i = 0; i < 6; i++) await ctx.tool(`a${i}`, i, async () => (await Bun.sleep(8), i));
    await ctx.parallel([
      () => ctx.workflow(kid, {}),
      async () => {
        for (let j = 0; j < 5; j++) await ctx.tool(`b${j}`, j, async () => (await Bun.sleep(8), j));
      },
    ]);
    await ctx.workflow(kid, {}, { name: "kid-again" });
    await ctx.shell("last", "echo done");
  },
});

/** Every event of a run tree, from the journal: "runId:seq" keys. */
async function treeEvents(journal: Journal, rootId: RunId): Promise<string[]> {
  const out: string[] = [];
  const visit = async (id: RunId) => {
    for (const e of await journal.readEvents(id)) out.push(`${id}:${e.seq}`);
    for (const c of await journal.listRuns({ parentId: id, rootsOnly: false })) await visit(c.id);
  };
  await visit(rootId);
  return out.sort();
}

function open(st: StatusFixture, runId: string, opts: { lastEventId?: string; query?: string; signal?: AbortSignal } = {}) {
  const headers: Record<string, string> = {};
  if (opts.lastEventId !== undefined) headers["last-event-id"] = opts.lastEventId;
  return st.req(`/api/runs/${runId}/stream${opts.query ?? ""}`, { headers, ...(opts.signal ? { signal: opts.signal } : {}) });
}

describe("status event stream", () => {
  test("a run's stream carries its events and its children's, each child announced before its events", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(busy);
      expect(out.status).toBe("completed");
      const st = statusFixture(fx.journal);
      try {
        const res = await open(st, out.runId);
        expect(res.status).toBe(200);
        expect(res.headers.get("content-type")).toContain("text/event-stream");
        expect(res.headers.get("cache-control")).toContain("no-cache");
        const sse = sseReader(res.body!);
        const msgs = await sse.until((m) => m.event === "ready");
        const journal = msgs.filter((m) => m.event === "journal").map(journalData);
        expect(journal.map((m) => `${m.runId}:${m.seq}`).sort()).toEqual(await treeEvents(fx.journal, out.runId));
        // per run, in seq order; a child's first event comes after the parent event naming it
        const children = (await fx.journal.listRuns({ parentId: out.runId, rootsOnly: false })).map((r) => r.id);
        expect(children).toHaveLength(2);
        for (const id of [out.runId, ...children]) {
          const seqs = journal.filter((m) => m.runId === id).map((m) => m.seq);
          expect(seqs).toEqual(seqs.map((_, i) => i + 1));
        }
        for (const child of children) {
          const announced = journal.findIndex((m) => m.type === "step_started" && m.payload?.childRunId === child);
          const first = journal.findIndex((m) => m.runId === child);
          expect(announced).toBeGreaterThanOrEqual(0);
          expect(first).toBeGreaterThan(announced);
        }
        expect(new Set(journal.filter((m) => m.runId !== out.runId).map((m) => m.path))).toEqual(new Set(["0", "1"]));
        // the ready message's id is the cursor at the end of every run
        const lastSeq = async (id: RunId) => (await fx.journal.getRun(id))!.lastSeq;
        const paths = new Map(journal.map((m) => [m.runId, m.path]));
        const byPath = [...children].sort((a, b) => paths.get(a)!.localeCompare(paths.get(b)!));
        const want = [`${await lastSeq(out.runId)}`, ...(await Promise.all(byPath.map(async (c) => `${paths.get(c)}:${await lastSeq(c)}`)))].join(";");
        expect(msgs.at(-1)!.id).toBe(want);
        await sse.cancel();

        // from=now: no history, only the ready message with the same cursor
        const now = sseReader((await open(st, out.runId, { query: "?from=now" })).body!);
        const first = await now.next();
        expect(first).toMatchObject({ event: "ready", id: want });
        await now.cancel();
      } finally {
        await st.close();
      }
    });
  });

  test("a client that reconnects with Last-Event-ID misses no event and gets none twice", async () => {
    await withEngine(async (fx) => {
      const driven = await fx.start(busy);
      const st = statusFixture(fx.journal);
      const received: string[] = [];
      let lastId: string | undefined;
      let connections = 0;
      const running = driven.run();
      let ended = false;
      void running.then(() => (ended = true));
      const runEnded = running.then(
        () => "run ended" as const,
        () => "run ended" as const,
      );
      try {
        // Connect, read a few messages, drop the connection mid-stream, reconnect from the last id; until the run ended.
        let take = 3;
        for (;;) {
          const abort = new AbortController();
          const res = await open(st, driven.runId, { ...(lastId ? { lastEventId: lastId } : {}), query: "?from=start", signal: abort.signal });
          expect(res.status).toBe(200);
          connections++;
          const sse = sseReader(res.body!);
          const wasEnded = ended;
          let readyAfterCatchUp = false;
          for (let n = 0; n < take || wasEnded; n++) {
            // The stream stays open after the run's last event: a connection made before the run ended stops
            // waiting when it ends (fewer than `take` messages may be left) and the next one, made after,
            // catches up to the end.
            const m: SseMessage | "run ended" | undefined = await (wasEnded ? sse.next() : Promise.race([sse.next(), runEnded]));
            if (!m || m === "run ended") break;
            if (m.id) lastId = m.id;
            if (m.event === "journal") {
              const d: JournalMessage = journalData(m);
              received.push(`${d.runId}:${d.seq}`);
            } else if (m.event === "ready" && wasEnded) {
              readyAfterCatchUp = true;
              break;
            }
          }
          abort.abort();
          await sse.cancel();
          if (readyAfterCatchUp) break;
          take = 2 + (take % 5);
        }
        expect((await running).status).toBe("completed");
        expect(connections).toBeGreaterThan(3);
        const all = await treeEvents(fx.journal, driven.runId);
        expect(received.length).toBe(new Set(received).size);
        expect([...received].sort()).toEqual(all);
      } finally {
        await running.catch(() => {});
        await st.close();
      }
    });
  });

  test("live events arrive as they are journaled; idle streams get heartbeats; drain delivers the last events", async () => {
    await withEngine(async (fx) => {
      const gate = join(makeTempDir(), "gate");
      const wf = workflow({
        name: "gated",
        async run(ctx) {
          await ctx.shell("wait", untilExists(shQuote(gate)));
          await ctx.shell("then", "echo then");
        },
      });
      const driven = await fx.start(wf);
      const running = driven.run();
      const st = statusFixture(fx.journal, { pollMs: 15, heartbeatMs: 40, idleCloseMs: 50, settledEvery: 3 });
      try {
        await waitUntil(async () => (await fx.journal.readEvents(driven.runId)).some((e) => e.type === "step_started"), "the stage to start");
        const sse = sseReader((await open(st, driven.runId, { query: "?from=now" })).body!);
        expect((await sse.next())!.event).toBe("ready");
        await sse.waitForComment();
        writeFileSync(gate, "");
        const seen = await sse.until((m) => m.event === "journal" && journalData(m).type === "checkpoint");
        expect(seen.every((m) => m.event === "journal")).toBe(true);
        expect((await running).status).toBe("completed");
        // stopping with drain: the stream gets the run's last events, then ends
        await st.source.close(true);
        const rest: SseMessage[] = [];
        for (let m = await sse.next(); m; m = await sse.next()) rest.push(m);
        expect(rest.map((m) => journalData(m).type).at(-1)).toBe("status_changed");
        expect(sse.ended).toBe(true);
      } finally {
        writeFileSync(gate, "");
        await running.catch(() => {});
        await st.close();
      }
    });
  });

  test("bad cursors are refused with 400; unknown runs with 404", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(busy);
      const st = statusFixture(fx.journal);
      try {
        const tip = (await fx.journal.getRun(out.runId))!.lastSeq;
        const cases: [Record<string, string>, string][] = [
          [{ lastEventId: "garbage" }, "bad_cursor"],
          [{ lastEventId: "1;0:2;0:3" }, "bad_cursor"],
          [{ lastEventId: `${tip + 1}` }, "bad_cursor"],
          [{ lastEventId: "1;7:1" }, "bad_cursor"],
          [{ lastEventId: "1;0:99999" }, "bad_cursor"],
          [{ query: "?cursor=x" }, "bad_cursor"],
          [{ query: "?from=yesterday" }, "bad_from"],
        ];
        for (const [opts, code] of cases) {
          const res = await open(st, out.runId, opts);
          expect([JSON.stringify(opts), res.status]).toEqual([JSON.stringify(opts), 400]);
          expect((await res.json() as { error: { code: string } }).error.code).toBe(code);
        }
        expect((await open(st, "0000000000zzzzzzzz")).status).toBe(404);
        // a valid cursor in the query works for clients that cannot set headers
        const sse = sseReader((await open(st, out.runId, { query: `?cursor=${tip - 1}` })).body!);
        const first = await sse.next();
        expect(first?.event).toBe("journal");
        expect(journalData(first!)).toMatchObject({ runId: out.runId, seq: tip });
        await sse.cancel();
      } finally {
        await st.close();
      }
    });
  });

  test("many clients of one run share one poller, which stops when they leave", async () => {
    await withEngine(async (fx) => {
      const out = await fx.run(kid);
      const st = statusFixture(fx.journal);
      try {
        const readers = await Promise.all(Array.from({ length: 25 }, async () => sseReader((await open(st, out.runId)).body!)));
        for (const r of readers) await r.until((m) => m.event === "ready");
        expect(st.source.streams.feedCount).toBe(1);
        expect(await st.source.streams.clientCount()).toBe(25);
        for (const r of readers) await r.cancel();
        await waitUntil(() => st.source.streams.feedCount === 0, "the poller to stop");
      } finally {
        await st.close();
      }
    });
  });
});

/**
 * Where attach's join (cli/attach-join.ts) says the live part begins: after the transcript up to the mark and
 * before any event it delivers, by a mark or by time, and never on close(). The view draws "── live ──" there
 * (test/tui/stage-pane.test.ts lets the stage's reply go once it sees it, and expects it in the live form).
 */

import { expect, test } from "bun:test";
import { TranscriptJoin, type JoinIo } from "../../src/cli/attach-join.ts";
import { MARK_EVENT, type LiveBatch, type LiveEvent } from "../../src/intercom/live.ts";

/** A join of attempt 1 whose every call to its io is logged in order ("deliver" with its events' texts or types). */
function loggedJoin(rest: string | undefined) {
  const log: string[] = [];
  const finished = Promise.withResolvers<void>();
  const io: JoinIo = {
    deliver: (b) => {
      if (b.events.length) log.push(`deliver ${b.events.map((e) => (typeof e.text === "string" ? e.text : e.type)).join(",")}`);
    },
    ask: () => {
      if (log.at(-1) !== "ask") log.push("ask");
    },
    rest: async () => rest,
    more: (text) => log.push(`more ${text}`),
    live: () => log.push("live"),
    done: () => {
      log.push("done");
      finished.resolve();
    },
  };
  return { log, finished: finished.promise, join: new TranscriptJoin(1, io) };
}

const batch = (...events: Partial<LiveEvent>[]): LiveBatch => ({ live: 1, runId: "r1", stage: "0", attempt: 1, events: events.map((e) => ({ type: "text_delta", at: Date.now(), ...e }) as LiveEvent) });

test("joined by a mark: the transcript up to it, then live, then the events after the mark; later ones as they come", async () => {
  const { log, finished, join } = loggedJoin("**tool list** {}");
  join.read(10, Date.now());
  join.batch(batch({ text: "before the mark" }, { type: MARK_EVENT, bytes: 30 }, { text: "after the mark" }), false);
  await finished; // the transcript's rest read, the join is over
  join.batch(batch({ text: "later" }), false);
  expect(log).toEqual(["ask", "more **tool list** {}", "live", "deliver after the mark", "done", "deliver later"]);
});

test("joined by time (a mark without bytes): live before the held events it keeps", () => {
  const { log, join } = loggedJoin("");
  join.read(0, 0);
  join.batch(batch({ text: "held" }, { type: MARK_EVENT }), false);
  expect(log).toEqual(["ask", "live", "deliver held,mark", "done"]);
});

test("a worker lost while joining (the attempt started again): live, then the new stream whole", () => {
  const { log, join } = loggedJoin("");
  join.read(0, 0);
  join.batch(batch({ type: "started" }, { text: "again" }), false);
  expect(log).toEqual(["ask", "live", "deliver started,again", "done"]);
});

test("closed before it joined (a stage that had ended, or attach leaving): no live part", () => {
  const { log, join } = loggedJoin("");
  join.close();
  expect(log).toEqual(["done"]);
});

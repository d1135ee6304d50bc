/**
 * The run list's frame (the console's own view drawn to a string, as pane-frame.test.ts draws the stage pane): a
 * list is counted and shown under the title of the filter it was read with only. `s` changes the filter before the
 * new filter's list is read: the title and the list read anew instead of the previous filter's count and runs.
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { createElement as h } from "react";
import { renderToString } from "ink";
import { SqliteJournal } from "../../src/journal/sqlite/sqlite-journal.ts";
import { ConsoleData, type RunFilter, type RunList } from "../../src/cli/tui/console-data.ts";
import { ConsoleView, type ConsoleFrame } from "../../src/cli/tui/console.ts";
import { makeStyle } from "../../src/cli/style.ts";
import { seedRun } from "../helpers/seed-runs.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterEach(removeTempDirs);

test("the run list is drawn under its own filter's title only: a new filter reads anew until its list arrives", async () => {
  const home = makeTempDir("atomic-list-");
  const journal = await SqliteJournal.open(join(home, "atomic.db"));
  const data = new ConsoleData(journal, home);
  try {
    await seedRun(journal, { stages: 1 });
    await seedRun(journal, { stages: 1 });
    const failed = await seedRun(journal, { stages: 1, status: "failed" });
    const draw = (filter: RunFilter, runs: RunList) => {
      const f: ConsoleFrame = { screen: "runs", filter, runs, runIndex: 0, stageIndex: 0, scroll: 0, focus: "tree", mode: { kind: "none" } };
      return renderToString(h(ConsoleView, { f, cols: 120, rows: 30, st: makeStyle(false), color: false, onAnswer() {}, onText() {} }), { columns: 120 });
    };
    const all = await data.runs({}, 500);
    // Its own filter: the count and the runs.
    expect(draw({}, all)).toContain("3 run(s) · status: all");
    // `s` pressed while the frame still holds every run's list: the failed filter's title, read anew, no run shown.
    const screen = draw({ status: "failed" }, all);
    expect(screen).toContain("reading runs… · status: failed");
    expect(screen).not.toContain("3 run(s)");
    expect(screen).not.toContain("completed");
    // The failed filter's own list: its count and its run.
    const own = draw({ status: "failed" }, await data.runs({ status: "failed" }, 500));
    expect(own).toContain("1 run(s) · status: failed");
    expect(own).toContain(failed.slice(0, 8));
  } finally {
    await data.close();
    await journal.close();
  }
});

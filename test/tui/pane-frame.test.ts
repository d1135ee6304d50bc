/**
 * The stage pane's frame (the console's own view drawn to a string, as bench/tui.ts draws it): a stage's
 * conversation is shown under that stage's header only. A selection moves before the new stage's feed has read
 * anything, and the feed of the stage selected before can still redraw in between (mouse.test.ts caught the
 * build's output under the question's header): the pane reads the new stage anew instead.
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { createElement as h } from "react";
import { renderToString } from "ink";
import { SqliteJournal } from "../../src/journal/sqlite/sqlite-journal.ts";
import { ConsoleData, rowKey } from "../../src/cli/tui/console-data.ts";
import { ConsoleView, rowsOf, type ConsoleFrame } from "../../src/cli/tui/console.ts";
import { makeStyle } from "../../src/cli/style.ts";
import { seedRun } from "../helpers/seed-runs.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterEach(removeTempDirs);

test("a stage's conversation is drawn under its own header only: another stage selected reads anew until its own arrives", async () => {
  const home = makeTempDir("atomic-pane-");
  const journal = await SqliteJournal.open(join(home, "atomic.db"));
  const data = new ConsoleData(journal, home);
  try {
    const id = await seedRun(journal, { stages: 2 });
    const detail = await data.detail(id);
    const [first, second] = rowsOf(detail);
    const draw = (stageIndex: number, of: string) => {
      const f: ConsoleFrame = { screen: "run", filter: {}, runIndex: 0, detail, stageIndex, scroll: 0, focus: "tree", mode: { kind: "none" }, conversation: { of, text: "the first stage's words", live: false } };
      return renderToString(h(ConsoleView, { f, cols: 100, rows: 30, st: makeStyle(false), color: false, onAnswer() {}, onText() {} }), { columns: 100 });
    };
    // Its own stage selected: the conversation is in the pane.
    expect(draw(0, rowKey(first!))).toContain("the first stage's words");
    // The second selected while the frame still holds the first's conversation: the second's header, read anew.
    const screen = draw(1, rowKey(first!));
    expect(screen).toContain(`── ${second!.step.name} (completed)`);
    expect(screen).toContain("reading…");
    expect(screen).not.toContain("the first stage's words");
  } finally {
    await data.close();
    await journal.close();
  }
});

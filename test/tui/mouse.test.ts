/**
 * The mouse in `atomic tui` (tmux, the real binary; the terminal's SGR mouse reports typed into the pane as a
 * terminal sends them): the console turns reporting on while it runs and off when it quits; on the run list
 * a click selects a run, a click on the selected run opens it, the wheel moves the selection; in a run a click
 * on a step of the tree selects it (its pane follows) and the wheel moves along the tree.
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { lineWatcher, spawnAtomic } from "../helpers/atomic.ts";
import { Tmux } from "../helpers/tmux.ts";
import { cleanup, newHome } from "./support.ts";

const DEMO = join(import.meta.dir, "fixtures", "console.ts");

afterEach(cleanup);

/** A press and a release of the left button at column `x`, row `y` (from 1), as xterm's SGR reports say it. */
const click = (t: Tmux, x: number, y: number) => t.type(`\x1b[<0;${x};${y}M\x1b[<0;${x};${y}m`);
const wheelDown = (t: Tmux, x: number, y: number) => t.type(`\x1b[<65;${x};${y}M`);
const wheelUp = (t: Tmux, x: number, y: number) => t.type(`\x1b[<64;${x};${y}M`);
/** The screen row (from 1) of the first line matching `re`. */
const rowOf = (screen: string, re: RegExp) => {
  const i = screen.split("\n").findIndex((l) => re.test(l));
  if (i < 0) throw new Error(`no line matches ${re} on the screen:\n${screen}`);
  return i + 1;
};

test("the mouse: a click selects a run and opens it, the wheel moves along; in a run a click selects a step; reporting ends with the console", async () => {
  const home = newHome();
  for (const id of ["mouse-1", "mouse-2"]) {
    const proc = spawnAtomic(["run", DEMO, "--id", id], { home });
    await lineWatcher(proc.stdout).waitFor(/question \S+: deploy where\?/);
  }
  const t = Tmux.atomic(["tui"], { home, cols: 100, rows: 30 });
  let screen = await t.waitFor(/› .*mouse-2/); // the newest first, selected
  expect(t.format("#{mouse_standard_flag} #{mouse_sgr_flag}")).toBe("1 1");
  // A click on the other run selects it; the wheel moves the selection back and forth.
  click(t, 10, rowOf(screen, /mouse-1/));
  screen = await t.waitFor(/› .*mouse-1/);
  wheelUp(t, 10, 5);
  await t.waitFor(/› .*mouse-2/);
  wheelDown(t, 10, 5);
  screen = await t.waitFor(/› .*mouse-1/);
  // A click on the selected run opens it, on its first step: the build's output.
  click(t, 10, rowOf(screen, /mouse-1/));
  screen = await t.waitFor("── build (completed)");
  await t.waitFor("compiling the parser");
  expect(screen).toContain("atomic tui · run mouse-1");
  // A click on the tree's second step (the question) selects it: the pane follows it.
  const build = rowOf(screen, /^› .*build/);
  click(t, 5, build + 1);
  screen = await t.waitFor(/^› (?!.*build)/m);
  // Never the build's output under the question's header (CI saw it while the build's feed still redrew).
  expect(screen).not.toContain("compiling the parser");
  screen = await t.waitFor("an ask step has no conversation");
  expect(screen).toContain("── deploy where? (");
  // The wheel over the tree moves back to the build.
  wheelUp(t, 5, build);
  await t.waitFor(/^› .*build/m);
  await t.waitFor("compiling the parser");
  t.keys("q");
  expect(await t.exited()).toBe(0);
  expect(t.format("#{mouse_standard_flag} #{mouse_sgr_flag}")).toBe("0 0");
}, 60_000);

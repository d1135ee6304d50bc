/**
 * `atomic tui` in a real terminal (tmux, the real binary): the run list
 * filtered by workflow, a run opened, a stage's conversation, a question
 * answered inline, a run cancelled; 80x24 with NO_COLOR, 200x60 with
 * colours and panes side by side, a resize to a terminal too small and
 * back; `atomic run --tui` driving a run under the console, and `atomic
 * resume --tui` driving the run it stopped on; the run list filtered by
 * status, `r` resuming and `R` rerunning the selected run in the
 * background, and `r` leaving it to the service when one runs; and the
 * console refused off a terminal. Waits are on what the screen shows;
 * every tmux server and run ends after each test, passed or failed.
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { Tmux } from "../helpers/tmux.ts";
import { cleanup, newHome } from "./support.ts";

const DEMO = join(import.meta.dir, "fixtures", "console.ts");
const ASKS = join(import.meta.dir, "fixtures", "asks.ts");
const COLOUR = /\x1b\[[0-9;]*(3[0-7]|38;[0-9;]+|9[0-7])m/;

afterEach(cleanup);

/** A run of the demo driven by a process of its own (not on a terminal), parked on its question. */
async function parkedDemo(home: string, id: string) {
  const proc = spawnAtomic(["run", DEMO, "--id", id], { home });
  await lineWatcher(proc.stdout).waitFor(/question \S+: deploy where\?/);
  return proc;
}

test("80x24, NO_COLOR: filter to a run, open it, read a stage, answer its question, cancel it", async () => {
  const home = newHome();
  const driver = await parkedDemo(home, "demo-1");
  const other = spawnAtomic(["run", ASKS, "--id", "other-1"], { home });
  await lineWatcher(other.stdout).waitFor(/question \S+: ship it\?/);
  const t = Tmux.atomic(["tui"], { home, cols: 80, rows: 24 });
  await t.waitFor(/demo-1[\s\S]*other-1|other-1[\s\S]*demo-1/);
  t.keys("w");
  await t.waitFor("a workflow name, empty for all");
  t.type("console-demo");
  await t.waitFor("workflow: console-demo");
  t.keys("Enter");
  await t.waitFor("1 run(s) · status: all · workflow: console-demo");
  t.keys("Enter");
  // The first stage is selected: its conversation (the shell stage's output) is in the pane.
  let screen = await t.waitFor("compiling the parser");
  expect(screen).toContain("1 open question(s): deploy where?");
  t.keys("a");
  await t.waitFor("❯ staging");
  t.keys("Down");
  await t.waitFor("❯ production");
  t.keys("Enter");
  await t.waitFor(/question \S+ answered: "production"/);
  await t.waitFor("◐ deploy");
  t.keys("Down", "Down");
  await t.waitFor("deploying to production");
  // P pauses the selected stage alone (atomic pause RUN STAGE), and unpauses it.
  const pausedStages = async () => (JSON.parse((await runAtomic(["show", "demo-1", "--json"], { home })).stdout) as { pausedStages?: string[] }).pausedStages;
  t.keys("P");
  await t.waitFor("stage deploy of run demo-1 paused");
  expect(await pausedStages()).toEqual(["deploy"]);
  await t.waitFor("◐ deploy (paused)");
  t.keys("P");
  await t.waitFor("stage deploy of run demo-1 unpaused");
  expect(await pausedStages()).toBeUndefined();
  await t.waitFor(/◐ deploy {2,}/);
  t.keys("c");
  await t.waitFor("cancel run demo-1? y cancels it");
  t.keys("y");
  screen = await t.waitFor("demo-1 cancelled");
  expect(screen).not.toContain("The terminal is");
  expect(await driver.exited).toBe(4);
  expect(t.screen(true)).not.toMatch(COLOUR);
  t.keys("q");
  expect(await t.exited()).toBe(0);
}, 90_000);

test("200x60 with colours: panes side by side; too small a terminal says so, and the console comes back", async () => {
  const home = newHome();
  await parkedDemo(home, "demo-2");
  const t = Tmux.atomic(["tui", "demo-2"], { home, cols: 200, rows: 60, env: { NO_COLOR: undefined } });
  // The stage tree and the conversation on the same lines.
  await t.waitFor(/› ✓ build.*── build \(completed\)/);
  await t.waitFor("compiling the parser"); // the pane follows the stage once its attach feed read the conversation
  expect(t.screen(true)).toMatch(COLOUR);
  t.resize(50, 10);
  await t.waitFor((screen) => screen.replace(/\s+/g, " ").includes("The terminal is 50x10, too small for atomic tui: make it at least 60x16 (q quits)."));
  t.resize(200, 60);
  await t.waitFor(/› ✓ build.*── build \(completed\)/);
  t.keys("q");
  expect(await t.exited()).toBe(0);
}, 90_000);

test("atomic run --tui drives the run under the console; q stops it resumably and the result follows", async () => {
  const home = newHome();
  const t = Tmux.atomic(["run", DEMO, "--id", "demo-3", "--tui"], { home, cols: 80, rows: 24 });
  await t.waitFor("driving run demo-3 here");
  await t.waitFor("1 open question(s): deploy where?");
  t.keys("a");
  await t.waitFor("❯ staging");
  t.keys("Enter");
  await t.waitFor("◐ deploy");
  t.keys("q");
  const status = await t.exited();
  const printed = t.history();
  expect(printed).toContain("run demo-3 interrupted");
  expect(printed.replace(/\s+/g, " ")).toContain("resume with: atomic resume demo-3");
  expect(status).toBe(130);
}, 90_000);

test("off a terminal the console says it needs one (exit 2), for tui and run --tui alike", async () => {
  const home = newHome();
  for (const args of [["tui"], ["run", DEMO, "--tui"]]) {
    const r = await runAtomic(args, { home });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("needs a terminal on its standard input and output");
    expect(r.stderr).toContain("hint: in a pipe or a script use atomic runs");
  }
});

test("atomic resume --tui drives the interrupted run on under the console: the stopped stage runs again", async () => {
  const home = newHome();
  const first = Tmux.atomic(["run", DEMO, "--id", "demo-4", "--tui"], { home, cols: 80, rows: 24 });
  await first.waitFor("1 open question(s): deploy where?");
  first.keys("a");
  await first.waitFor("❯ staging");
  first.keys("Enter");
  await first.waitFor("◐ deploy");
  first.keys("Down", "Down");
  await first.waitFor("deploying to staging");
  first.keys("q");
  expect(await first.exited()).toBe(130);
  const t = Tmux.atomic(["resume", "demo-4", "--tui"], { home, cols: 80, rows: 24 });
  await t.waitFor("driving run demo-4 here");
  // The keys move the selection along the tree's rows: pressed before the run is read (CI: the line above was
  // on screen, the tree not yet), they would move nothing.
  await t.waitFor(/^› ✓ build/m);
  t.keys("Down", "Down");
  // Its second attempt runs (not left queued): the console shows it running and its output.
  await t.waitFor(/── deploy \(running\)[\s\S]*deploying to staging/);
  // The pane's output can be on screen before the tree's row reads ×2 (the fresh-clone run of b59b8e9): wait for the row too.
  await t.waitFor(/› ◐ deploy .*×2/);
  t.keys("c");
  await t.waitFor("cancel run demo-4? y cancels it");
  t.keys("y");
  await t.waitFor("demo-4 cancelled");
  t.keys("q");
  expect(await t.exited()).toBe(4);
}, 90_000);

test("the run list filtered by status; r resumes the selected run in the background, R reruns it", async () => {
  const home = newHome();
  const driver = spawnAtomic(["run", DEMO, "--id", "demo-5"], { home });
  const watch = lineWatcher(driver.stdout);
  await watch.waitFor(/question \S+: deploy where\?/);
  const inbox = JSON.parse((await runAtomic(["inbox", "demo-5", "--json"], { home })).stdout) as { prompts: { id: string; state: string }[] };
  expect((await runAtomic(["answer", "demo-5", inbox.prompts.find((p) => p.state === "open")!.id, "staging"], { home })).code).toBe(0);
  await watch.waitFor(/stage deploy started/);
  driver.kill("SIGINT");
  expect(await driver.exited).toBe(130);
  const status = async (id: string) => (JSON.parse((await runAtomic(["show", id, "--json"], { home })).stdout) as { run: { status: string } }).run.status;
  expect(await status("demo-5")).toBe("interrupted");
  const t = Tmux.atomic(["tui"], { home, cols: 80, rows: 24 });
  await t.waitFor("demo-5");
  for (const shown of ["running", "awaiting_input", "failed", "completed", "interrupted"]) {
    t.keys("s");
    await t.waitFor(`status: ${shown}`);
  }
  await t.waitFor(/1 run\(s\) · status: interrupted/);
  t.keys("r");
  await t.waitFor((screen) => screen.replace(/\s+/g, " ").includes("atomic resume demo-5 runs in the background"));
  await waitUntil(async () => (await status("demo-5")) === "running", 30_000, "demo-5 to run again");
  // Back to every run (past "cancelled"): the resumed run, cancelled from the list, then run anew.
  t.keys("s");
  await t.waitFor("status: cancelled");
  t.keys("s");
  await t.waitFor(/1 run\(s\) · status: all/);
  t.keys("c");
  await t.waitFor("cancel run demo-5? y cancels it");
  t.keys("y");
  await waitUntil(async () => (await status("demo-5")) === "cancelled", 30_000, "demo-5 to be cancelled");
  t.keys("R");
  await t.waitFor((screen) => screen.replace(/\s+/g, " ").includes("atomic rerun demo-5 runs in the background"));
  // `atomic runs --json`: one run per line.
  const runs = async () => (await runAtomic(["runs", "--json"], { home })).stdout.split("\n").filter((l) => l.includes("console-demo")).length;
  await waitUntil(async () => (await runs()) === 2, 30_000, "the rerun to start a second run");
  t.keys("q");
  expect(await t.exited()).toBe(0);
}, 90_000);

test("with the service running, r leaves the interrupted run to the service", async () => {
  const home = newHome();
  const driver = spawnAtomic(["run", DEMO, "--id", "demo-6"], { home });
  const watch = lineWatcher(driver.stdout);
  await watch.waitFor(/question \S+: deploy where\?/);
  const inbox = JSON.parse((await runAtomic(["inbox", "demo-6", "--json"], { home })).stdout) as { prompts: { id: string; state: string }[] };
  expect((await runAtomic(["answer", "demo-6", inbox.prompts.find((p) => p.state === "open")!.id, "staging"], { home })).code).toBe(0);
  await watch.waitFor(/stage deploy started/);
  driver.kill("SIGINT");
  expect(await driver.exited).toBe(130);
  const status = async () => (JSON.parse((await runAtomic(["show", "demo-6", "--json"], { home })).stdout) as { run: { status: string } }).run.status;
  expect(await status()).toBe("interrupted");
  // The service, once it holds its lease (it says it is active).
  const service = spawnAtomic(["--json", "serve", "--port", "0"], { home });
  await lineWatcher(service.stdout).waitFor(/"type":"service_active"/, 30_000);
  const t = Tmux.atomic(["tui"], { home, cols: 80, rows: 24 });
  await t.waitFor("demo-6");
  t.keys("r");
  await t.waitFor((screen) => screen.replace(/\s+/g, " ").includes("run demo-6 resumed: left to the service"));
  await waitUntil(async () => (await status()) === "running", 30_000, "demo-6 to run again under the service");
  t.keys("c");
  await t.waitFor("cancel run demo-6? y cancels it");
  t.keys("y");
  await waitUntil(async () => (await status()) === "cancelled", 30_000, "demo-6 to be cancelled");
  t.keys("q");
  expect(await t.exited()).toBe(0);
  service.kill("SIGTERM");
  expect(await service.exited).toBe(0);
}, 90_000);

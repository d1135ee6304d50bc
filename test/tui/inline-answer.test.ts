/**
 * `atomic run` on a terminal answers ctx.ask right there (tmux, the real
 * binary): the choices as a picker, free text as a line; a question
 * answered first from `atomic answer` is taken off the screen with a line
 * saying so, and a later answer is refused there as already answered.
 * Waits are on what the screen shows, never fixed sleeps; every tmux
 * server and run is ended after each test, passed or failed.
 */

import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { Tmux } from "../helpers/tmux.ts";
import { cleanup, newHome } from "./support.ts";

const ASKS = join(import.meta.dir, "fixtures", "asks.ts");

afterEach(cleanup);

test("a picker and a line answer the run's questions in its own terminal (80x24, NO_COLOR)", async () => {
  const home = newHome();
  const t = Tmux.atomic(["run", ASKS, "--id", "inline-1"], { home, cols: 80, rows: 24 });
  await t.waitFor("ship it?");
  await t.waitFor("later");
  t.keys("Down");
  await t.waitFor("❯ no"); // Enter after the picker moved (keys in one read can outrun it)
  t.keys("Enter");
  await t.waitFor(/question \S+ answered: "no"/);
  const next = await t.waitFor("why?");
  // The answered question's picker is gone from the screen: only the line saying it was answered stays.
  expect(next).not.toContain("later");
  expect(next).not.toContain("sending");
  t.type("because it is friday");
  await t.waitFor("> because it is friday");
  t.keys("Enter");
  const end = await t.waitFor(/run inline-1 completed/);
  expect(end).toContain('"because it is friday"');
  expect(await t.exited()).toBe(0);
  // NO_COLOR (the test environment sets it): not one colour escape on the screen.
  expect(t.screen(true)).not.toMatch(/\x1b\[[0-9;]*3[0-9]m|\x1b\[38;/);
  const shown = JSON.parse((await runAtomic(["show", "inline-1", "--json"], { home })).stdout) as { run: { outputs: unknown } };
  expect(shown.run.outputs).toEqual({ ship: "no", why: "because it is friday" });
}, 90_000);

test("a question answered first from atomic answer leaves the terminal saying so (200x60)", async () => {
  const home = newHome();
  const t = Tmux.atomic(["run", ASKS, "--id", "inline-2"], { home, cols: 200, rows: 60 });
  await t.waitFor("ship it?");
  const inbox = JSON.parse((await runAtomic(["inbox", "inline-2", "--json"], { home })).stdout) as { prompts: { id: string; state: string }[] };
  const open = inbox.prompts.find((p) => p.state === "open")!;
  const answered = await runAtomic(["answer", "inline-2", open.id, "later"], { home });
  expect(answered.code).toBe(0);
  await t.waitFor(`question ${open.id} was answered from atomic answer: "later"`);
  // The next question is on the screen; the first one can be answered nowhere any more.
  await t.waitFor("why?");
  const again = await runAtomic(["answer", "inline-2", open.id, "yes"], { home });
  expect(again.code).toBe(2);
  expect(again.stderr).toContain(`question ${open.id} of run inline-2 was already answered with "later"`);
  t.type("ok");
  await t.waitFor("> ok");
  t.keys("Enter");
  await t.waitFor(/run inline-2 completed/);
  expect(await t.exited()).toBe(0);
}, 90_000);

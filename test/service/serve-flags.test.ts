/**
 * `atomic serve`'s service flags through the binary: `--no-recover` serves
 * the page and leaves a crashed run alone (GET /api/service lists no
 * recovery duty), `--no-schedules` is accepted, and a bad `--max-runs` is
 * one sentence and a hint (exit 2) before anything listens.
 */

import { expect, test } from "bun:test";
import { runAtomic } from "../helpers/atomic.ts";
import { kill9, newSetup, runIdOf, serviceCleanup, show, startRun, startService } from "./support.ts";

serviceCleanup();

test("serve --no-recover --no-schedules: the page, no recovery; a crashed run stays crashed", async () => {
  const s = newSetup();
  const service = startService(s, ["--no-recover", "--no-schedules"]);
  const serving = JSON.parse(await service.log.waitFor(/"type":"serving"/)) as { url: string; tokenFile: string; duties: string[] };
  expect(serving.duties).toEqual([]);
  await service.log.waitFor(/"type":"service_active"/);
  const run = startRun(s, "gate");
  const runId = await runIdOf(run.out);
  await run.out.waitFor(/at the gate/);
  await kill9(run.proc);
  const token = (await Bun.file(serving.tokenFile).text()).trim();
  const res = await fetch(new URL("/api/service", serving.url), { headers: { Authorization: `Bearer ${token}` } });
  expect(await res.json()).toMatchObject({ state: "active", duties: [], active: { self: true } });
  await Bun.sleep(1500);
  expect(service.events("drive_started")).toEqual([]);
  expect((await show(s, runId)).status).toBe("crashed");
}, 120_000);

test("serve --max-runs 0 is one sentence and a hint, exit 2", async () => {
  const s = newSetup();
  const r = await runAtomic(["--home", s.home, "serve", "--port", "0", "--max-runs", "0"], { home: s.home });
  expect(r.code).toBe(2);
  expect(r.stderr).toBe('error: --max-runs must be a whole number from 1 to 1000, got "0".\nhint: the default is 4\n');
  expect(r.stdout).toBe("");
});

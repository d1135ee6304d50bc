/**
 * Bad input on the HTTP stage pause and unpause route (POST
 * /api/runs/:id/control with `stage`) through the real binary: `atomic
 * serve` answers for a run `atomic run` drives in another process. Each
 * refusal is one sentence with a hint, its status says what kind it is
 * (400 bad input, 404 nothing to address, 409 not now), and nothing is
 * recorded: the run's control stays as it was and no event is appended.
 * Refused: pause of a finished stage, a typo'd stage, a pattern, a stage
 * that is no string, cancel of one stage, unpause of a stage not paused,
 * run ids that name no run, and pause of a stage once the run has ended.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir, startedRunId } from "../e2e/support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const FIXTURE = join(import.meta.dir, "fixtures", "gated-stages.ts");

interface Refusal {
  error: { code: string; message: string; hint?: string };
}

e2eTest("the stage control route refuses bad input with one sentence, the right status and nothing recorded", async () => {
  const home = makeTempDir();
  const gate = join(makeTempDir(), "gate");
  const env = { GATE: gate };
  const run = spawnAtomic(["run", FIXTURE], { home, env });
  const serve = spawnAtomic(["serve", "--port", "0"], { home, env });
  try {
    const id = startedRunId(await lineWatcher(run.stdout).waitFor(/^started run /));
    const login = (await lineWatcher(serve.stdout).waitFor(/^status page: /)).slice("status page: ".length).trim();
    const [, url, token] = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
    const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
    const post = (runId: string, body: unknown) => fetch(`${url}api/runs/${runId}/control`, { method: "POST", headers, body: JSON.stringify(body) });
    /** The run's stages, its control request and revision, and how many events it has. */
    const state = async () => {
      const detail = (await (await fetch(`${url}api/runs/${id}`, { headers })).json()) as {
        run: { control: string | null; controlRev: number; lastSeq: number };
        report: { steps: { name: string; status: string }[] };
      };
      const { control, controlRev, lastSeq } = detail.run;
      return { steps: detail.report.steps.map((s) => `${s.name}:${s.status}`), control, controlRev, lastSeq };
    };
    await waitUntil(async () => (await state()).steps.includes("wait:running"), 30_000, "the stage wait to run");
    const before = await state();

    const refusals: [string, unknown, number, string, RegExp][] = [
      [id, { action: "pause", stage: "first" }, 409, "stage_ended", new RegExp(`^stage first of run ${id} has finished \\(completed\\)$`)],
      [id, { action: "pause", stage: "frist" }, 404, "no_such_stage", /has no stage frist/],
      [id, { action: "pause", stage: "l*" }, 400, "bad_stage", /not a pattern/],
      [id, { action: "pause", stage: 5 }, 400, "bad_body", /stage must be a stage's path/],
      [id, { action: "cancel", stage: "later" }, 400, "bad_body", /takes no stage/],
      [id, { action: "unpause", stage: "later" }, 409, "not_paused", new RegExp(`^stage later of run ${id} is not paused$`)],
      ["0000000000zzzzzzzz", { action: "pause", stage: "wait" }, 404, "unknown_run", /0000000000zzzzzzzz/],
      ["not a run", { action: "pause", stage: "wait" }, 404, "unknown_run", /not a run/],
    ];
    for (const [runId, body, status, code, message] of refusals) {
      const res = await post(encodeURIComponent(runId), body);
      const got = (await res.json()) as Refusal;
      expect({ body, status: res.status, code: got.error.code }).toEqual({ body, status, code });
      expect(got.error.message).toMatch(message);
      expect(got.error.message).not.toContain("\n");
      expect(got.error.hint).toBeTruthy();
    }
    expect(await state()).toEqual(before);

    writeFileSync(gate, "");
    expect(await run.exited).toBe(0);
    const ended = await post(id, { action: "pause", stage: "later" });
    expect(ended.status).toBe(409);
    expect(((await ended.json()) as Refusal).error).toMatchObject({ code: "not_running", message: `run ${id} is not running (it is completed)` });
    const after = await state();
    expect(after.steps).toEqual(["first:completed", "wait:completed", "later:completed"]);
    expect({ control: after.control, controlRev: after.controlRev }).toEqual({ control: before.control, controlRev: before.controlRev });
  } finally {
    writeFileSync(gate, "");
    serve.kill("SIGINT");
    await serve.exited;
    await run.exited;
  }
});

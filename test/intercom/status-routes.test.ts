/**
 * The status page's intercom routes (POST /api/runs/:id/messages and
 * /answers) over the Hono app (`app.request()`), on a run driven by the
 * engine in this process: a message to a stage that has not started is
 * queued and reaches it; a question is answered; refusals map to 400 (bad
 * input), 404 (nothing to address) and 409 (not now), with the same codes
 * as the CLI.
 */

import { afterEach, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { workflow } from "../../src/sdk/index.ts";
import { engineAfterEach, shQuote, waitUntil, withEngine } from "../engine/helpers.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { json, statusFixture } from "../status/support.ts";

import { untilExists } from "../helpers/gate.ts";
afterEach(engineAfterEach);

test("POST messages and answers: queued and delivered, answered; refusals are 400, 404 or 409 with their codes", async () => {
  await withEngine(async (fx) => {
    const gate = join(makeTempDir(), "gate");
    const wf = workflow({
      name: "page-mail",
      async run(ctx) {
        await ctx.shell("gate", untilExists(shQuote(gate)));
        const heard = await ctx.shell("reader", 'read -r l; echo "got:$l"');
        const ok = await ctx.ask("ship it?", { choices: ["yes", "no"] });
        return { heard: heard.text.trim(), ok };
      },
    });
    const st = statusFixture(fx.journal);
    try {
      const driven = await fx.start(wf);
      const running = driven.run();
      const id = driven.runId;
      await waitUntil(() => fx.eventsOf("step_started").some((e) => e.name === "gate"), "the gate stage");
      const sent = await st.post(`/api/runs/${id}/messages`, { stage: "reader", text: "from the page" });
      expect(sent.status).toBe(202);
      expect(await json(sent)).toMatchObject({ runId: id, target: "reader", deliveries: [{ stage: "reader", state: "queued", started: false }] });
      const refusals: [unknown, number, string][] = [
        [{ stage: "gate/x", text: "x" }, 404, "no_such_stage"],
        [{ stage: "zz*", text: "x" }, 404, "no_match"],
        [{ stage: "reader", text: "" }, 400, "empty_message"],
        [{ stage: "reader", text: "x", mode: "loud" }, 400, "bad_mode"],
        [{ stage: "reader", text: 5 }, 400, "bad_body"],
      ];
      for (const [body, status, code] of refusals) {
        const res = await st.post(`/api/runs/${id}/messages`, body);
        expect({ body, status: res.status, code: (await json(res)).error.code }).toEqual({ body, status, code });
      }
      expect((await st.post(`/api/runs/${id}/messages`, "{nope")).status).toBe(400);
      writeFileSync(gate, "");
      const q = await waitUntil(async () => (await fx.journal.messages.prompts(id, "open"))[0], "the question");
      const detail = await json(await st.req(`/api/runs/${id}`));
      expect(JSON.stringify(detail)).toContain("awaiting_input");
      const bad = await st.post(`/api/runs/${id}/answers`, { question: q.id, answer: "maybe" });
      expect(bad.status).toBe(400);
      expect((await json(bad)).error.code).toBe("bad_answer");
      expect((await st.post(`/api/runs/${id}/answers`, { question: "q0000000", answer: "yes" })).status).toBe(404);
      const ok = await st.post(`/api/runs/${id}/answers`, { question: q.id, answer: "yes" });
      expect(ok.status).toBe(200);
      expect(await json(ok)).toEqual({ runId: id, question: q.id, status: "answered", answer: "yes" });
      const again = await st.post(`/api/runs/${id}/answers`, { question: q.id, answer: "no" });
      expect(again.status).toBe(409);
      expect((await json(again)).error.code).toBe("already_answered");
      expect(await running).toMatchObject({ status: "completed", outputs: { heard: "got:from the page", ok: "yes" } });
      const late = await st.post(`/api/runs/${id}/messages`, { stage: "reader", text: "too late" });
      expect(late.status).toBe(409);
      expect((await json(late)).error.code).toBe("run_ended");
    } finally {
      await st.close();
    }
  });
});

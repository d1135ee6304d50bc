/**
 * ctx.patched and ctx.deprecatePatch (issue 26), on a real SQLite journal
 * through the engine: true for a new run, recording one marker; false when
 * a resumed run replays history recorded without the marker (the old path
 * replays cleanly), true past that history; true again when the history
 * holds the marker; deprecatePatch replays histories with and without it;
 * an id asked twice fails the run in one sentence.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { workflow } from "../../src/sdk/index.ts";
import { EVENT } from "../../src/engine/journal-events.ts";
import { engineAfterEach, withEngine } from "./helpers.ts";

afterEach(engineAfterEach);

const markers = (events: { type: string; payload: unknown }[]) => events.filter((e) => e.type === EVENT.patchRecorded).map((e) => (e.payload as { patchId: string }).patchId);

describe("ctx.patched", () => {
  test("a new run takes the new path and records the marker once; replaying its history takes it again", async () => {
    await withEngine(async (fx) => {
      let failOnce = true;
      const wf = workflow({
        name: "patched-new",
        async run(ctx) {
          const path = ctx.patched("v2") ? "new" : "old";
          const a = await ctx.tool(path, {}, () => path);
          await ctx.tool("gate", {}, () => {
            if (failOnce) throw new Error("stop here");
            return true;
          });
          return a;
        },
      });
      const first = await fx.run(wf);
      expect(first.status).toBe("failed");
      failOnce = false;
      const again = await fx.resumeRun(first.runId, wf);
      expect(again.status).toBe("completed");
      expect(again.outputs).toBe("new");
      expect(markers(await fx.journal.readEvents(first.runId))).toEqual(["v2"]);
    });
  });

  test("history recorded without the marker replays the old path; past it the run takes the new one", async () => {
    await withEngine(async (fx) => {
      let failOnce = true;
      const old = workflow({
        name: "patched-old",
        async run(ctx) {
          const a = await ctx.tool("old-step", {}, () => "old");
          await ctx.tool("gate", {}, () => {
            if (failOnce) throw new Error("stop here");
            return true;
          });
          return [a];
        },
      });
      const first = await fx.run(old);
      expect(first.status).toBe("failed");
      failOnce = false;
      const changed = workflow({
        name: "patched-old",
        async run(ctx) {
          // Around a recorded step: the history holds no marker, so the old step replays.
          const a = ctx.patched("new-first") ? await ctx.tool("new-step", {}, () => "new") : await ctx.tool("old-step", {}, () => "old");
          await ctx.tool("gate", {}, () => true);
          // Past the history: new ground, the new path.
          const b = ctx.patched("new-last") ? "new" : "old";
          return [a, b];
        },
      });
      const out = await fx.resumeRun(first.runId, changed);
      expect(out.status).toBe("completed");
      expect(out.outputs).toEqual(["old", "new"]);
      expect(markers(await fx.journal.readEvents(first.runId))).toEqual(["new-last"]);
    });
  });

  test("deprecatePatch replays histories with and without the marker; an id asked twice fails the run naming it", async () => {
    await withEngine(async (fx) => {
      const withMarker = workflow({
        name: "patched-deprecated",
        async run(ctx) {
          ctx.patched("v2");
          return ctx.tool("step", {}, () => "done");
        },
      });
      const first = await fx.run(withMarker);
      expect(first.status).toBe("completed");
      const deprecated = workflow({
        name: "patched-deprecated",
        async run(ctx) {
          ctx.deprecatePatch("v2");
          return ctx.tool("step", {}, () => "done");
        },
      });
      const fresh = await fx.run(deprecated);
      expect(fresh.status).toBe("completed");
      expect(markers(await fx.journal.readEvents(fresh.runId))).toEqual(["v2"]);
      const twice = await fx.run(
        workflow({
          name: "patched-twice",
          async run(ctx) {
            ctx.patched("v2");
            return ctx.patched("v2");
          },
        }),
      );
      expect(twice.status).toBe("failed");
      expect(twice.error?.code).toBe("patch_id_reused");
      expect(twice.error?.message).toBe('the patch id "v2" was already used in this run (ctx.patched asks each id once)');
      expect(markers(await fx.journal.readEvents(twice.runId))).toEqual(["v2"]);
    });
  });
});

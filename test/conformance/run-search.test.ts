/**
 * Searching run listings on every journal backend (journal/run-search.ts):
 * text in the id, workflow name, inputs, outputs or error, ignoring case;
 * a time range (created since, before); combined with workflow, status and
 * tags; counted as listed, paged.
 */

import { afterEach, describe, expect, test } from "bun:test";
import type { Journal } from "../../src/journal/journal.ts";
import { newRunId, type RunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, liveHolder, sqlite } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

async function run(j: Journal, at: number, workflowName: string, inputs: unknown, end?: { outputs?: unknown; error?: { code: string; message: string } }): Promise<RunId> {
  const id = newRunId(at);
  const lease = await j.acquireLease(id, liveHolder(), { timeoutMs: 60_000 });
  await j.append(lease, [
    { runId: id, type: "run_started", payload: {}, at, newRun: { rootId: id, parentId: null, parentKey: null, depth: 0, workflowName, workflowPath: `/${workflowName}.ts`, workflowDigest: "d", inputs } },
  ]);
  if (end) {
    const patch = end.error
      ? { status: "failed" as const, error: { name: "Error", ...end.error, disposition: "terminal" as const }, endedAt: at + 1 }
      : { status: "completed" as const, outputs: end.outputs, endedAt: at + 1 };
    await j.append(lease, [{ runId: id, type: end.error ? "run_failed" : "run_completed", payload: {}, at: at + 1, patch }]);
  }
  await j.releaseLease(lease);
  return id;
}

for (const backend of BACKENDS) {
  describe(`${backend.name}: run search`, () => {
    test(`${backend.name}: text in id, workflow, inputs, outputs and error; time range; with the other filters; counted and paged`, async () => {
      const j = await backend.open(makeTempDir("atomic-search-"));
      open.push(j);
      const a = await run(j, 1_000, "review", { topic: "Durable Queues", note: 'say "hi"' }, { outputs: { verdict: "ship it" } });
      const b = await run(j, 2_000, "deploy", { target: "prod" }, { error: { code: "boom", message: "Kubernetes refused the rollout" } });
      const c = await run(j, 3_000, "review", { topic: "caching" });
      await j.tags.set(c, { team: "search" }, 3_000);
      const ids = async (filter: Parameters<Journal["listRuns"]>[0]) => (await j.listRuns(filter)).map((r) => r.id);

      expect(await ids({ text: "durable" })).toEqual([a]); // inputs, any case
      expect(await ids({ text: "SHIP IT" })).toEqual([a]); // outputs
      expect(await ids({ text: "kubernetes" })).toEqual([b]); // the error's message
      expect(await ids({ text: 'say "hi"' })).toEqual([a]); // a quote as typed matches the stored JSON
      expect(await ids({ text: "deplo" })).toEqual([b]); // the workflow name
      expect(await ids({ text: c.slice(0, 14) })).toEqual([c]); // the id
      expect(await ids({ text: "100%" })).toEqual([]); // no wildcard
      expect(await ids({ text: "_" })).toEqual([]);
      expect(await ids({ text: "  " })).toEqual([c, b, a]); // blank: no text filter
      expect(await ids({ text: "topic" })).toEqual([c, a]);
      expect(await ids({ text: "topic", workflowName: "review", status: "completed" })).toEqual([a]);
      expect(await ids({ text: "topic", tags: { team: "search" } })).toEqual([c]);
      expect(await ids({ createdSince: 2_000, createdBefore: 3_000 })).toEqual([b]);
      expect(await ids({ createdBefore: 2_000 })).toEqual([a]);
      expect(await ids({ text: "topic", createdSince: 1_500 })).toEqual([c]);
      expect(await j.countRuns({ text: "topic" })).toBe(2);
      expect(await j.countRuns({ text: "nothing like it" })).toBe(0);
      expect(await ids({ text: "topic", limit: 1, offset: 1 })).toEqual([a]);
    });
  });
}

describe("sqlite: a text search past the newest 2,000 roots", () => {
  test("sqlite: a rare text in an old run, a text in a few runs and one in most, paged as the plain listing orders them", async () => {
    const j = await sqlite.open(makeTempDir("atomic-search-"), "normal");
    open.push(j);
    const all: { id: RunId; mark: string }[] = [];
    for (let i = 0; i < 2_100; i++) {
      const mark = i === 5 ? "unique-old" : i % 40 === 0 ? "needle" : "hay";
      all.push({ id: await run(j, 1_000 + i, "bulk", { n: i, mark }), mark });
    }
    const newestFirst = all.reverse();
    const expected = (mark: string) => newestFirst.filter((r) => r.mark === mark).map((r) => r.id);
    const ids = async (filter: Parameters<Journal["listRuns"]>[0]) => (await j.listRuns(filter)).map((r) => r.id);

    expect(await ids({ text: "unique-old", limit: 50, offset: 0 })).toEqual([all.find((r) => r.mark === "unique-old")!.id]);
    expect(await ids({ text: "needle", limit: 50, offset: 0 })).toEqual(expected("needle").slice(0, 50));
    expect(await ids({ text: "needle", limit: 50, offset: 50 })).toEqual(expected("needle").slice(50));
    expect(await ids({ text: "needle" })).toEqual(expected("needle"));
    expect(await ids({ text: "hay", limit: 50, offset: 0 })).toEqual(expected("hay").slice(0, 50));
    expect(await ids({ text: "hay", limit: 50, offset: 2_000 })).toEqual(expected("hay").slice(2_000, 2_050));
    expect(await ids({ text: "hay", limit: 50, offset: 2_100 })).toEqual([]);
    expect(await ids({ text: "unique-old", status: "failed", limit: 50, offset: 0 })).toEqual([]);
    expect(await j.countRuns({ text: "needle" })).toBe(expected("needle").length);
  }, 60_000);
});

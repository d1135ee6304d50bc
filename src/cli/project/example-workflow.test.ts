/**
 * The example workflow's test, written by `atomic init` beside it
 * (.atomic/workflows/summarize.test.ts): the agent is scripted, the shell
 * stage stubbed, and the run crashes once at the agent stage, so the test
 * also shows that a resumed run replays what it recorded.
 *
 *   atomic test .atomic/workflows
 */

import { expect, test } from "bun:test";
import { testRun } from "atomic/testing";
import summarize from "./example-workflow.ts";

test("summarize returns the agent's title and points and the line count, also after a crash", async () => {
  const result = await testRun(summarize, {
    // the agent stage reads the file it summarizes: this test's own file is one that exists
    inputs: { file: new URL(import.meta.url).pathname },
    shell: { "count-lines": { stdout: "42 summarize.test.ts\n" } },
    agents: { summarize: [{ structured: { title: "atomic", points: ["durable", "one binary"] } }] },
    crashAt: "summarize",
  });
  expect(result.status).toBe("completed");
  expect(result.outputs).toEqual({ title: "atomic", points: ["durable", "one binary"], lines: 42 });
  // after the crash the line count came from the journal; the agent stage ran again
  const resumed = result.steps.filter((s) => s.drive === 2).map((s) => [s.name, s.replayed]);
  expect(resumed).toEqual([["count-lines", true], ["summarize", false]]);
});

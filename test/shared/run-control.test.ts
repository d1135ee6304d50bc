/** The control row's values (src/journal/run-control.ts): run actions, stage requests carrying the run's pause, and the paused stages they leave. */

import { expect, test } from "bun:test";
import { controlText, parseControl, pausedStages, runPausedBy, stageControl } from "../../src/journal/run-control.ts";
import { shownStatus } from "../../src/journal/run-status.ts";

test("run actions, stage requests and the run's pause carried with them", () => {
  expect(parseControl(null)).toEqual({});
  expect(parseControl("pause")).toEqual({ run: "pause" });
  expect(parseControl("cancel")).toEqual({ run: "cancel" });
  expect(parseControl("something-else")).toEqual({});
  expect(parseControl(stageControl(false, "review/security", true))).toEqual({ stage: { path: "review/security", paused: true } });
  // A path may hold ":" and ";": everything after the request's own prefix is the path.
  expect(parseControl(stageControl(true, "a:b;c", false))).toEqual({ run: "pause", stage: { path: "a:b;c", paused: false } });
  expect(runPausedBy(stageControl(true, "x", true))).toBe(true);
  expect(runPausedBy(stageControl(false, "x", true))).toBe(false);
  expect(runPausedBy("unpause")).toBe(false);
});

test("the paused stages are what the applied values leave, in order; run-level values change none", () => {
  expect([...pausedStages(["stage-pause:a", "pause", "stage-pause:b", "pause;stage-unpause:a", "unpause", "cancel"])]).toEqual(["b"]);
  expect(pausedStages([]).size).toBe(0);
});

test("a live run whose row carries a stage request while the run is paused still shows paused", () => {
  const lease = { rootId: "r", epoch: 1, holderId: "h", host: "another-host", pid: 1, renewedAt: Date.now(), timeoutMs: 60_000 };
  const run = { status: "running", control: stageControl(true, "x", true) } as Parameters<typeof shownStatus>[0];
  expect(shownStatus(run, lease as Parameters<typeof shownStatus>[1])).toBe("paused");
  expect(shownStatus({ ...run, control: stageControl(false, "x", true) }, lease as Parameters<typeof shownStatus>[1])).toBe("running");
});

test("a control value as people read it", () => {
  expect(controlText("pause")).toBe("pause requested");
  expect(controlText("stage-pause:review/fix")).toBe("pause of stage review/fix requested");
  expect(controlText("pause;stage-unpause:deploy")).toBe("pause, unpause of stage deploy requested");
  expect(controlText(null)).toBeUndefined();
});

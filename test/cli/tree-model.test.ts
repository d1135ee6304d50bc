/** The live tree (cli/view/tree-model.ts): running tool steps are named while they run, then counted. */

import { expect, test } from "bun:test";
import { TreeModel } from "../../src/cli/view/tree-model.ts";
import { makeStyle } from "../../src/cli/style.ts";

test("a running tool is named under its run until it ends; then only counted", () => {
  const tree = new TreeModel();
  const style = makeStyle(false);
  tree.apply({ type: "run_started", runId: "r1", parentId: null, workflow: "wf", resumed: false, at: 0 });
  tree.apply({ type: "step_started", runId: "r1", position: "0", kind: "tool", name: "fetch-page", attempt: 1, at: 1 });
  expect(tree.render(style, 10).join("\n")).toContain("tools: 0 done, running: fetch-page");
  tree.apply({ type: "step_ended", runId: "r1", position: "0", kind: "tool", name: "fetch-page", status: "completed", replayed: false, at: 5 });
  const after = tree.render(style, 10).join("\n");
  expect(after).toContain("tools: 1 done");
  expect(after).not.toContain("running:");
});

test("a stage queued for a worker host says why it waits once the hosts are read, until it starts", () => {
  const tree = new TreeModel();
  const style = makeStyle(false);
  tree.apply({ type: "run_started", runId: "r1", parentId: null, workflow: "wf", resumed: false, at: 0 });
  tree.apply({ type: "step_started", runId: "r1", position: "0", kind: "stage", name: "prep", attempt: 1, queued: true, at: 1 });
  expect(tree.hostQueued()).toBe(false);
  tree.apply({ type: "step_started", runId: "r1", position: "1", kind: "stage", name: "train", attempt: 1, queued: true, hostQueue: "gpu", at: 2 });
  expect(tree.hostQueued()).toBe(true);
  tree.setHosts([], 10);
  const lines = tree.render(style, 10);
  expect(lines.find((l) => l.includes("train"))).toContain("queued  waiting for a worker on queue gpu; no worker host has served it");
  expect(lines.find((l) => l.includes("prep"))).not.toContain("waiting");
  tree.apply({ type: "step_running", runId: "r1", position: "1", name: "train", attempt: 1, at: 20 });
  expect(tree.hostQueued()).toBe(false);
  expect(tree.render(style, 30).join("\n")).not.toContain("waiting for a worker");
});

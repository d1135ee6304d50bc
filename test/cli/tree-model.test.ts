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

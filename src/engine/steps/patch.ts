/**
 * ctx.patched(id) and ctx.deprecatePatch(id): versioning inside a
 * workflow, with Temporal's semantics (docs/guides/changing-workflows.md).
 *
 * A patch marker is an event (`patch_recorded { patchId }`) without a
 * replay position, so a call added to running code shifts no step. At the
 * call:
 *
 * - the history holds the marker: true (this run took the new path);
 * - the run is still replaying recorded checkpoints: false (the history
 *   was recorded by code without the change: the old path);
 * - otherwise (a new run, or a resumed run past its history): the marker is
 *   recorded and the answer is true.
 *
 * `deprecatePatch` records the marker the same way and answers nothing: it
 * replays histories with or without it. One id is asked once per run: a
 * second call is a mistake in the workflow (two changes sharing an id) and
 * fails the run (`patch_id_reused`). The marker is appended behind the
 * steps before it and before any after it (the tree's group commit keeps
 * order), without waiting: the call stays synchronous.
 */

import { AtomicError } from "../../shared/errors.ts";
import { EVENT } from "../journal-events.ts";
import type { StepRun } from "../step-run.ts";

export function runPatched(exec: StepRun, id: unknown, deprecated: boolean): boolean {
  const what = deprecated ? "ctx.deprecatePatch" : "ctx.patched";
  if (typeof id !== "string" || id.length === 0 || id.length > 200) {
    throw new AtomicError("bad_patch_id", `${what} needs a non-empty id of at most 200 characters, got ${JSON.stringify(id)}`, "terminal", {
      hint: 'name the change: ctx.patched("new-review")',
    });
  }
  if (exec.patchesAsked.has(id)) {
    throw new AtomicError("patch_id_reused", `the patch id ${JSON.stringify(id)} was already used in this run (${what} asks each id once)`, "terminal", {
      hint: "give each change its own id, or keep the first answer in a variable",
    });
  }
  exec.patchesAsked.add(id);
  if (exec.cursor.patches.has(id)) return true;
  if (exec.cursor.replaying) return false;
  exec.cursor.patches.add(id);
  const write = exec.tree.append({ runId: exec.runId, type: EVENT.patchRecorded, payload: { patchId: id } });
  // Awaited at the run's end (run-execution.ts); until then a failure must not surface as an unhandled rejection.
  write.catch(() => {});
  exec.patchWrites.push(write);
  return true;
}

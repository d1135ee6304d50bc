/**
 * `atomic rerun RUN [--input k=v ...] [--inputs-json FILE] [--workflow FILE] [--cwd DIR]`:
 * a new run of RUN's workflow (its recorded file or builtin, in its recorded
 * directory, or the file and directory named)
 * with RUN's inputs; each --input replaces one (an array input: the whole
 * array), converted and validated as `atomic run` does. The new run records
 * which run it reruns.
 */

import { defineCommand } from "citty";
import { parseInputPairs, reviveInputs } from "../../engine/inputs.ts";
import { repeatedFlag } from "../globals.ts";
import { NEW_RUN_ARGS, assertRootRun, loadRecorded, startAndDrive } from "../new-run.ts";
import { session } from "../session.ts";
import { readInputsJson } from "./run.ts";

export default defineCommand({
  meta: { name: "rerun", description: "Start a new run of a run's workflow with its inputs (--input overrides one)" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    input: { type: "string", description: "an input to change (key=value); repeat the flag for more" },
    inputsJson: { type: "string", description: "a JSON file with inputs to change" },
    ...NEW_RUN_ARGS,
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run);
    assertRootRun(run, "rerun");
    const events = await (await s.journal()).readEvents(run.id);
    const json = args.inputsJson ? readInputsJson(args.inputsJson) : undefined;
    const loaded = await loadRecorded(s, run, events, { workflow: args.workflow, cwd: args.cwd });
    const schemas = loaded.definition.inputs ?? {};
    // The recorded inputs (validated when the run started), then the changes over them, validated again whole.
    const recorded = reviveInputs(schemas, (run.inputs ?? {}) as Record<string, unknown>);
    const inputs = parseInputPairs(schemas, repeatedFlag(s.rawArgs, "input"), { ...recorded, ...json }, loaded.path);
    await startAndDrive(s, args, loaded, { inputs, origin: { kind: "rerun", runId: run.id } });
  },
});

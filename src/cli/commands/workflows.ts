/**
 * `atomic workflows`: list the workflow files in `.atomic/workflows/` of the
 * current directory and the builtins shipped in the binary (a local file of
 * a builtin's name wins over it, and the list says so).
 * `atomic workflows NAME` (or `--inputs NAME`, a file or a builtin) lists
 * one workflow's inputs (type, default, range), outputs and the stages it
 * declares (WorkflowConfig.stages);
 * `atomic workflows NAME --source` prints a builtin's source.
 */

import { defineCommand } from "citty";
import { basename, join, relative } from "node:path";
import { describeInputs } from "../../engine/inputs.ts";
import { loadWorkflowFile } from "../../engine/loader.ts";
import { BUILTIN_PREFIX, builtinNames, builtinSource } from "../../engine/builtins.ts";
import { closeMatches } from "../../shared/close-matches.ts";
import { UsageError } from "../../shared/errors.ts";
import type { WorkflowDefinition } from "../../sdk/types.ts";
import { session, type CliSession } from "../session.ts";
import { out } from "../output.ts";
import { registeredWorkflowFiles, resolveWorkflowArg } from "../../engine/workflow-names.ts";

export default defineCommand({
  meta: { name: "workflows", description: "List workflows (.atomic/workflows/ and the builtins), or one workflow's inputs and outputs" },
  args: {
    name: { type: "positional", description: "a workflow file or name, or a builtin's name: show its inputs and outputs", required: false },
    inputs: { type: "string", description: "show the inputs of this workflow file (or name)" },
    source: { type: "boolean", description: "print the builtin's source (copy it to write your own)" },
    dir: { type: "string", description: "directory to list (default .atomic/workflows)" },
  },
  async run({ args }) {
    const s = session();
    const target = args.inputs ?? (args.name as string | undefined);
    if (args.source) {
      const src = target === undefined ? undefined : builtinSource(target);
      if (src === undefined) {
        throw new UsageError("workflow_not_found", `${target === undefined ? "--source needs a builtin's name" : `there is no builtin workflow named ${JSON.stringify(target)}`}`, {
          hint: `${target === undefined ? "" : closeMatches(target, builtinNames(), 3).map((n, i, all) => `${i === 0 ? "did you mean " : ""}${n}${i === all.length - 1 ? "? " : ", "}`).join("")}the builtins are: ${builtinNames().join(", ")}`,
        });
      }
      out(src);
      return;
    }
    if (target !== undefined) return showOne(s, target);
    const dir = args.dir ?? join(process.cwd(), ".atomic", "workflows");
    const files = registeredWorkflowFiles(dir);
    const found = [];
    for (const f of files) {
      const path = join(dir, f);
      const overrides = builtinSource(basename(f, ".ts")) !== undefined ? basename(f, ".ts") : null;
      try {
        const { definition } = await loadWorkflowFile(path);
        found.push({ file: relative(process.cwd(), path), name: definition.name, description: definition.description ?? null, error: null, builtin: false, overrides });
      } catch (err) {
        found.push({ file: relative(process.cwd(), path), name: null, description: null, error: (err as Error).message, builtin: false, overrides });
      }
    }
    const local = new Set(found.map((w) => w.overrides).filter(Boolean));
    const builtins = [];
    for (const name of builtinNames()) {
      const { definition } = await loadWorkflowFile(`${BUILTIN_PREFIX}${name}`);
      builtins.push({ file: null, name, description: definition.description ?? null, error: null, builtin: true, overridden: local.has(name) });
    }
    if (s.globals.json) {
      for (const w of [...found, ...builtins]) s.json(w);
      return;
    }
    if (found.length === 0) s.info(`no workflows in ${relative(process.cwd(), dir) || dir}; put .ts workflow files there, or run one by path: atomic run FILE`);
    for (const w of found) {
      const note = w.overrides ? s.style.dim(`  (overrides the builtin ${w.overrides})`) : "";
      if (w.error) s.result(`${w.file}  ${s.style.red(`cannot load: ${w.error}`)}${note}`);
      else s.result(`${w.file}  ${s.style.bold(w.name ?? "")}${w.description ? `  ${w.description}` : ""}${note}`);
    }
    s.result("builtin workflows (atomic run NAME --input ...; atomic workflows NAME for its inputs):");
    for (const w of builtins) {
      const note = w.overridden ? s.style.dim(`  (overridden by .atomic/workflows/${w.name}.ts)`) : "";
      s.result(`  ${s.style.bold(w.name)}  ${w.description ?? ""}${note}`);
    }
  },
});

async function showOne(s: CliSession, target: string): Promise<void> {
  const ref = resolveWorkflowArg(target);
  const { definition, path } = await loadWorkflowFile(ref);
  const inputs = describeInputs(definition.inputs ?? {});
  const outputs = describeOutputs(definition);
  const builtin = path.startsWith(BUILTIN_PREFIX);
  if (s.globals.json) {
    return s.json({ name: definition.name, description: definition.description ?? null, inputs, ...(outputs.length ? { outputs } : {}), ...(definition.stages?.length ? { stages: definition.stages } : {}), ...(builtin ? { builtin } : {}) });
  }
  s.result(`${definition.name}${definition.description ? `: ${definition.description}` : ""}${builtin ? s.style.dim("  (builtin)") : ""}`);
  if (inputs.length === 0) s.result("  (no inputs)");
  for (const i of inputs) {
    const def = "default" in i ? ` (default ${JSON.stringify(i.default)})` : "";
    const range = i.range ? `, ${i.range}` : "";
    s.result(`  ${i.name}: ${i.type}${i.required ? "" : " optional"}${range}${def}${i.description ? `  ${i.description}` : ""}`);
  }
  if (outputs.length) {
    s.result("outputs:");
    for (const o of outputs) s.result(`  ${o.name}: ${o.type}${o.description ? `  ${o.description}` : ""}`);
  }
  if (definition.stages?.length) {
    s.result("stages:");
    for (const st of definition.stages) s.result(`  ${st.name}  ${st.description}`);
  }
}

type Described = { type: string; entries?: Record<string, Described>; wrapped?: Described; pipe?: { type: string; description?: string }[] };

/** The keys of an object outputs schema, each with its type. */
function describeOutputs(definition: WorkflowDefinition): { name: string; type: string; description?: string }[] {
  const schema = definition.outputs as Described | undefined;
  if (!schema?.entries) return [];
  return Object.entries(schema.entries).map(([name, e]) => {
    let inner = e;
    while (inner.wrapped) inner = inner.wrapped;
    const description = inner.pipe?.find((a) => a.type === "description")?.description;
    return { name, type: inner.type, ...(description ? { description } : {}) };
  });
}

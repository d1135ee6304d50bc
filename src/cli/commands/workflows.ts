/**
 * `atomic workflows`: list the workflow files in `.atomic/workflows/` of the
 * current directory; `atomic workflows --inputs FILE` lists one workflow's
 * inputs (name, type, required, default).
 */

import { defineCommand } from "citty";
import { existsSync, readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { describeInputs } from "../../engine/inputs.ts";
import { loadWorkflowFile } from "../../engine/loader.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "workflows", description: "List workflows in .atomic/workflows/, or a workflow's inputs" },
  args: {
    inputs: { type: "string", description: "show the inputs of this workflow file" },
    dir: { type: "string", description: "directory to list (default .atomic/workflows)" },
  },
  async run({ args }) {
    const s = session();
    if (args.inputs !== undefined) {
      const { definition } = await loadWorkflowFile(args.inputs);
      const inputs = describeInputs(definition.inputs ?? {});
      if (s.globals.json) return s.json({ name: definition.name, description: definition.description ?? null, inputs });
      s.result(`${definition.name}${definition.description ? `: ${definition.description}` : ""}`);
      if (inputs.length === 0) s.result("  (no inputs)");
      for (const i of inputs) {
        const def = "default" in i ? ` (default ${JSON.stringify(i.default)})` : "";
        s.result(`  ${i.name}: ${i.type}${i.required ? "" : " optional"}${def}`);
      }
      return;
    }
    const dir = args.dir ?? join(process.cwd(), ".atomic", "workflows");
    const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".ts")).sort() : [];
    const found = [];
    for (const f of files) {
      const path = join(dir, f);
      try {
        const { definition } = await loadWorkflowFile(path);
        found.push({ file: relative(process.cwd(), path), name: definition.name, description: definition.description ?? null, error: null });
      } catch (err) {
        found.push({ file: relative(process.cwd(), path), name: null, description: null, error: (err as Error).message });
      }
    }
    if (s.globals.json) {
      for (const w of found) s.json(w);
      return;
    }
    if (found.length === 0) {
      s.info(`no workflows in ${relative(process.cwd(), dir) || dir}; put .ts workflow files there, or run one by path: atomic run FILE`);
      return;
    }
    for (const w of found) {
      if (w.error) s.result(`${w.file}  ${s.style.red(`cannot load: ${w.error}`)}`);
      else s.result(`${w.file}  ${s.style.bold(w.name ?? "")}${w.description ? `  ${w.description}` : ""}`);
    }
  },
});

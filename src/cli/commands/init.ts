/** `atomic init [DIR]`: types, a tsconfig and an example workflow for a project (project/setup.ts). */

import { defineCommand } from "citty";
import { join, relative, resolve } from "node:path";
import { VERSION } from "../../shared/version.ts";
import { EXAMPLE_PATH, initProject } from "../project/setup.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "init", description: "Set up a project for writing workflows: the SDK's types, a tsconfig.json and an example workflow" },
  args: {
    dir: { type: "positional", description: "the project's directory (default: the current one)", required: false },
  },
  async run({ args }) {
    const s = session();
    const dir = (args.dir as string | undefined) ?? ".";
    const report = await initProject(dir);
    const shown = (p: string) => relative(process.cwd(), join(resolve(dir), p)) || p;
    if (s.globals.json) {
      s.json({ version: VERSION, wrote: report.wrote.map((w) => shown(w.path)), kept: report.kept.map((k) => shown(k.path)), advice: report.advice });
      return;
    }
    for (const w of report.wrote) s.result(`wrote ${shown(w.path)}: ${w.what}`);
    for (const k of report.kept) s.result(`kept ${shown(k.path)}: ${k.what}`);
    for (const line of report.advice) s.result(line);
    s.info(`next: atomic check ${shown(EXAMPLE_PATH)}`);
  },
});

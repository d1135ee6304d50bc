/** `atomic types [DIR]`: rewrite `.atomic/types/atomic.d.ts` with this binary's SDK declarations (after an upgrade). */

import { defineCommand } from "citty";
import { join, relative, resolve } from "node:path";
import { VERSION } from "../../shared/version.ts";
import { writeTypes } from "../project/setup.ts";
import { session } from "../session.ts";

export default defineCommand({
  meta: { name: "types", description: "Rewrite .atomic/types/atomic.d.ts with this atomic's SDK declarations (run it after an upgrade)" },
  args: {
    dir: { type: "positional", description: "the project's directory (default: the current one)", required: false },
  },
  async run({ args }) {
    const s = session();
    const dir = (args.dir as string | undefined) ?? ".";
    const path = relative(process.cwd(), join(resolve(dir), await writeTypes(resolve(dir))));
    if (s.globals.json) s.json({ version: VERSION, wrote: [path] });
    else s.result(`wrote ${path}: the declarations of atomic ${VERSION}'s SDK`);
  },
});

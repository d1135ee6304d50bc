/** `atomic version`. */

import { defineCommand } from "citty";
import { VERSION } from "../../shared/version.ts";
import { session } from "../session.ts";
import { out } from "../output.ts";

export default defineCommand({
  meta: { name: "version", description: "Print the version" },
  args: {},
  run() {
    const s = session();
    if (s.globals.json) s.json({ version: VERSION, bun: Bun.version });
    else out(`${VERSION}\n`);
  },
});

/** `atomic version`. */

import { defineCommand } from "citty";
import { buildInfo, VERSION } from "../../shared/version.ts";
import { session } from "../session.ts";
import { out } from "../output.ts";

export default defineCommand({
  meta: { name: "version", description: "Print the version (--json: also the commit, build date and platform)" },
  args: {},
  run() {
    const s = session();
    if (s.globals.json) s.json(buildInfo());
    else out(`${VERSION}\n`);
  },
});

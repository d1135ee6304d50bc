/**
 * A fake agent CLI as one self-contained executable (test/runners/fixtures/
 * fake-agent.ts with `#!` naming this Bun and its kind baked in), so that a
 * stage in its default sandbox can run it wherever the checkout lies: the
 * sandbox shows a program, and the interpreter its `#!` names, but hides
 * /tmp and the home (docs/design/sandbox.md), where a fresh clone's
 * fixtures may be.
 */

import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const FAKE = join(import.meta.dir, "..", "runners", "fixtures", "fake-agent.ts");

/** Writes `dir/fake-<kind>` and returns its path. */
export function writeFakeCli(dir: string, kind: string): string {
  const path = join(dir, `fake-${kind}`);
  // Imports are hoisted, statements are not: the kind is in argv before the fake reads it.
  writeFileSync(path, `#!${process.execPath}\nprocess.argv.splice(2, 0, ${JSON.stringify(kind)});\n${readFileSync(FAKE, "utf8")}`);
  chmodSync(path, 0o755);
  return path;
}

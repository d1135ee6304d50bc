/**
 * Builds the single binary dist/atomic.
 *
 * Flags (see docs/design/platform.md): the binary must not read bunfig.toml or .env from
 * the user's directory (a preload script would run inside atomic; .env
 * secrets would leak into process.env), NODE_ENV is fixed to production
 * (a binary built from inside `bun test` would otherwise inherit "test"),
 * and --bytecode (which needs ESM) halves start-up time.
 */

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { ENTRY_POINTS } from "../src/shared/entry-points.ts";

const root = join(import.meta.dir, "..");
const outfile = process.argv[2] ?? join(root, "dist", "atomic");
mkdirSync(join(outfile, ".."), { recursive: true });

const result = await Bun.build({
  // Each a bundle of its own in the binary (src/shared/entry-points.ts says why).
  entrypoints: ENTRY_POINTS.map((f) => join(root, "src", f)),
  // Bundles keep their paths under src/ (importEntry finds them there). Named, not inferred: Bun 1.4.4 infers
  // the common directory of up to 8 entry points, and the repository's root for 9 (measured).
  root: join(root, "src"),
  compile: {
    outfile,
    autoloadBunfig: false,
    autoloadDotenv: false,
  },
  format: "esm",
  bytecode: true,
  minify: { syntax: true, whitespace: true },
  sourcemap: "linked",
  define: { "process.env.NODE_ENV": '"production"' },
});

if (!result.success) {
  for (const log of result.logs) console.error(log);
  process.exit(1);
}
console.log(`built ${outfile}`);

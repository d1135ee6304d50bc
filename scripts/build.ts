/**
 * Builds the single binary dist/atomic.
 *
 * Flags (see STACK.md): the binary must not read bunfig.toml or .env from
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

/**
 * Writes the reference pages under docs/reference/ from the code.
 *
 *   bun scripts/reference/generate.ts           write every page
 *   bun scripts/reference/generate.ts --check   write nothing; exit 1 naming every stale page
 *
 * Every module in scripts/reference/pages/ default-exports a `ReferencePage`:
 * `{ path: "docs/reference/NAME.md", render(): string | Promise<string> }`.
 * A page is stale when what `render()` returns differs from the file (or
 * the file is missing). The docs test (test/docs/) runs `--check`, so a
 * change to a command, a route or the SDK without regenerating fails it.
 */

import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { closeTypeScript } from "./lib/typescript.ts";
import { loadPages, ROOT } from "./lib/pages.ts";

async function main(): Promise<number> {
  const check = process.argv.includes("--check");
  const stale: string[] = [];
  try {
    for (const page of await loadPages()) {
      const file = join(ROOT, page.path);
      const text = await page.render();
      const current = existsSync(file) ? readFileSync(file, "utf8") : undefined;
      if (current === text) continue;
      if (check) {
        stale.push(page.path);
      } else {
        mkdirSync(dirname(file), { recursive: true });
        writeFileSync(file, text);
        process.stdout.write(`wrote ${relative(process.cwd(), file)}\n`);
      }
    }
  } finally {
    await closeTypeScript();
  }
  if (stale.length > 0) {
    process.stderr.write(`stale reference pages: ${stale.join(", ")}\nhint: regenerate them with: bun scripts/reference/generate.ts\n`);
    return 1;
  }
  return 0;
}

process.exit(await main());

/**
 * The test kit as the test process of `atomic test` reaches it. That
 * process is this binary acting as Bun's own CLI (`BUN_BE_BUN=1`), which
 * runs Bun's test runner but cannot import the modules bundled in the
 * binary. So they are written out first: every bundle and chunk under
 * `/$bunfs/root/` (and each file they import as text) is copied into a private temporary directory, its
 * absolute imports pointed there, and a preload script registers
 * "atomic" and "atomic/testing" as modules backed by the test kit's
 * bundle (src/testing/kit.ts), as the loader registers "atomic" for a
 * workflow file (src/engine/loader.ts). Each bundle that code loads by
 * name (importEntry) gets a file at the path it looks for, re-exporting
 * the copy.
 *
 * From source (`bun src/main.ts test`) nothing is copied: the preload
 * imports src/testing/kit.ts itself.
 */

import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { ENTRY_POINTS } from "../shared/entry-points.ts";
import { isCompiled } from "../shared/self-exec.ts";

const BUNFS = "/$bunfs/root/";

export interface TestKit {
  /** The private directory holding the copy and the preload; the caller removes it. */
  dir: string;
  preload: string;
}

export function writeTestKit(): TestKit {
  const dir = mkdtempSync(join(tmpdir(), "atomic-test-kit-"));
  chmodSync(dir, 0o700);
  let kit: string;
  if (isCompiled()) {
    const root = join(dir, "root");
    for (const name of readdirSync(BUNFS, { recursive: true }) as string[]) {
      if (!name.endsWith(".js")) {
        // A file a bundle imports by its path (pi's run-tools extension, imported as text); not the executable
        // itself, listed there under its own name with no extension.
        if (/\.\w+$/.test(name)) {
          mkdirSync(dirname(join(root, name)), { recursive: true });
          writeFileSync(join(root, name), readFileSync(BUNFS + name));
        }
        continue;
      }
      const text = readFileSync(BUNFS + name, "utf8")
        // The copy has no bytecode beside it: the pragma would make Bun look for it.
        .replace(/^\/\/ @bun @bytecode/, "// @bun")
        .replaceAll(BUNFS, `${root}/`);
      mkdirSync(dirname(join(root, name)), { recursive: true });
      writeFileSync(join(root, name), text);
    }
    // importEntry looks for `<base>/<entry>.ts`, base being the parent of the chunks' directory (root).
    for (const entry of ENTRY_POINTS) {
      const shim = join(dir, entry);
      const target = join(root, entry.replace(/\.ts$/, ".js"));
      mkdirSync(dirname(shim), { recursive: true });
      writeFileSync(shim, `export * from ${JSON.stringify(`./${relative(dirname(shim), target)}`)};\n`);
    }
    kit = join(root, "testing", "kit.js");
  } else {
    kit = join(import.meta.dir, "..", "testing", "kit.ts");
  }
  const preload = join(dir, "preload.mjs");
  writeFileSync(
    preload,
    `import { plugin } from "bun";
import * as kit from ${JSON.stringify(kit)};
plugin({
  name: "atomic-test-kit",
  setup(build) {
    build.module("atomic", () => ({ loader: "object", exports: { ...kit.sdk, default: kit.sdk } }));
    build.module("atomic/testing", () => ({ loader: "object", exports: { ...kit.testing, default: kit.testing } }));
  },
});
`,
  );
  return { dir, preload };
}

/**
 * The declarations of the public SDK as one file (`.atomic/types/atomic.d.ts`
 * in a user's project, written by `atomic init` and `atomic types`), made
 * from the SDK's source at build time so they never drift from it:
 * scripts/build.ts embeds the result in the binary.
 *
 *   bun scripts/types/declarations.ts [OUTFILE]   (default: stdout)
 *
 * How: the project's TypeScript compiler emits a .d.ts per source file of
 * each public module's entry (PUBLIC_MODULES) into a scratch folder; the
 * files an entry's declarations reach through their imports become one
 * ambient `declare module "atomic/_/<path>"` block each, their imports
 * rewritten to those names (an ambient module may not import by a relative
 * path), and each entry becomes `declare module "<public name>"`. Packages
 * the SDK re-exports (PACKAGES: valibot, as `v`) are embedded the same way
 * from their own bundled declarations. Any other import is an error here,
 * so a new dependency of the SDK's types cannot slip out unnoticed.
 * docs/design/types-and-check.md describes the whole.
 */

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = join(import.meta.dir, "..", "..");

/** Each public module name and its entry under src/. Adding a module is one line here. */
export const PUBLIC_MODULES: Record<string, string> = {
  atomic: "sdk/index.ts",
  "atomic/testing": "testing/index.ts",
};

/** Packages the SDK's declarations import, and the bundled declarations file each ships. */
const PACKAGES: Record<string, string> = {
  valibot: "node_modules/valibot/dist/index.d.mts",
};

/**
 * Declarations a workflow's test needs beside the SDK's, kept as they are (each already declares its module):
 * `bun:test`, which `atomic test` provides, from the Bun types the project depends on. The files they import
 * by relative paths become internal modules `atomic/_/<path under node_modules>`.
 */
const AMBIENT = ["node_modules/bun-types/test.d.ts"];

/** The internal module name of an emitted file (`sdk/types.d.ts` → `atomic/_/sdk/types`). */
function internalName(relPath: string): string {
  return `atomic/_/${relPath.replace(/\.d\.ts$/, "")}`;
}

const SPECIFIER = /(\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)(["'])([^"']+)\2/gm;

/**
 * One declarations file's text as the body of an ambient module: imports renamed by `rename`, and the
 * top-level `declare` modifiers dropped (a module declaration is already ambient).
 */
function asModuleBody(text: string, rename: (specifier: string) => string): string {
  // Comment lines are left alone (a doc comment may quote an import).
  const code = (line: string) => !/^\s*(\*|\/\/|\/\*)/.test(line);
  return text
    .split("\n")
    .map((line) => (code(line) ? line.replace(SPECIFIER, (_m, lead: string, quote: string, spec: string) => `${lead}${quote}${rename(spec)}${quote}`) : line))
    .join("\n")
    .replace(/^(export )?declare (?!module |global )/gm, "$1")
    .replace(/^\/\/# sourceMappingURL=.*$/gm, "")
    .trimEnd();
}

function block(name: string, body: string): string {
  return `declare module ${JSON.stringify(name)} {\n${body}\n}\n`;
}

/** The whole file: a header, then every public module, then the internal modules they reach. */
export function sdkDeclarations(version: string): string {
  const scratch = mkdtempSync(join(tmpdir(), "atomic-dts-"));
  try {
    const entries = Object.values(PUBLIC_MODULES).map((e) => join(ROOT, "src", e));
    const tsc = join(ROOT, "node_modules", ".bin", "tsc");
    const emit = Bun.spawnSync(
      [tsc, "--ignoreConfig", "--declaration", "--emitDeclarationOnly", "--outDir", scratch, "--rootDir", join(ROOT, "src"), "--target", "esnext", "--module", "preserve", "--moduleResolution", "bundler", "--allowImportingTsExtensions", "--rewriteRelativeImportExtensions", "--strict", "--skipLibCheck", "--types", "bun", "--pretty", "false", ...entries],
      { cwd: ROOT, stdout: "pipe", stderr: "pipe" },
    );
    if (emit.exitCode !== 0) throw new Error(`tsc could not emit the SDK's declarations:\n${emit.stdout.toString()}${emit.stderr.toString()}`);

    const out: string[] = [];
    const internal = new Map<string, string>(); // internal module name → its block
    const usedPackages = new Set<string>();
    const pending: string[] = [];
    const renamer = (fromRel: string) => (spec: string) => {
      if (spec.startsWith(".")) {
        const target = relative(scratch, resolve(dirname(join(scratch, fromRel)), spec)).replace(/\.(m|c)?tsx?$/, ".d.ts");
        const withExt = target.endsWith(".d.ts") ? target : `${target}.d.ts`;
        if (!internal.has(internalName(withExt)) && !pending.includes(withExt)) pending.push(withExt);
        return internalName(withExt);
      }
      if (spec in PACKAGES) {
        usedPackages.add(spec);
        return `atomic/_/${spec}`;
      }
      throw new Error(`the SDK's declarations (${fromRel}) import ${JSON.stringify(spec)}, which the one-file declarations do not embed: add it to PACKAGES in scripts/types/declarations.ts`);
    };
    for (const [name, entry] of Object.entries(PUBLIC_MODULES)) {
      const rel = entry.replace(/\.ts$/, ".d.ts");
      out.push(block(name, asModuleBody(readFileSync(join(scratch, rel), "utf8"), renamer(rel))));
    }
    while (pending.length) {
      const rel = pending.shift()!;
      const name = internalName(rel);
      if (internal.has(name)) continue;
      internal.set(name, ""); // claimed before its imports are followed
      internal.set(name, block(name, asModuleBody(readFileSync(join(scratch, rel), "utf8"), renamer(rel))));
    }
    for (const pkg of [...usedPackages].sort()) {
      const text = readFileSync(join(ROOT, PACKAGES[pkg]!), "utf8");
      internal.set(`atomic/_/${pkg}`, block(`atomic/_/${pkg}`, asModuleBody(text, (spec) => {
        throw new Error(`${pkg}'s declarations import ${JSON.stringify(spec)}; embed it too`);
      })));
    }
    // The ambient files, and the files of their package they import.
    const ambient: string[] = [];
    const packageQueue: string[] = [];
    const packageRenamer = (fromRel: string) => (spec: string) => {
      if (!spec.startsWith(".")) throw new Error(`${fromRel} imports ${JSON.stringify(spec)}; embed it too`);
      const base = join(dirname(join(ROOT, fromRel)), spec);
      const file = [`${base}.d.ts`, join(base, "index.d.ts"), base].find((f) => existsSync(f) && f.endsWith(".d.ts"));
      if (!file) throw new Error(`${fromRel} imports ${JSON.stringify(spec)}, which has no declarations file`);
      const rel = relative(ROOT, file);
      const name = `atomic/_/${relative("node_modules", rel).replace(/(\/index)?\.d\.ts$/, "")}`;
      if (!internal.has(name) && !packageQueue.includes(rel)) packageQueue.push(rel);
      return name;
    };
    for (const rel of AMBIENT) ambient.push(asModuleBody(readFileSync(join(ROOT, rel), "utf8"), packageRenamer(rel)));
    while (packageQueue.length) {
      const rel = packageQueue.shift()!;
      const name = `atomic/_/${relative("node_modules", rel).replace(/(\/index)?\.d\.ts$/, "")}`;
      if (internal.has(name)) continue;
      internal.set(name, "");
      internal.set(name, block(name, asModuleBody(readFileSync(join(ROOT, rel), "utf8"), packageRenamer(rel))));
    }
    const header = [
      `// The declarations of atomic's SDK (atomic ${version}), generated from its source when the binary was built.`,
      "// Written by `atomic init`; `atomic types` rewrites it after an upgrade. Do not edit: changes are overwritten.",
      `// Public modules: ${Object.keys(PUBLIC_MODULES).map((n) => JSON.stringify(n)).join(", ")}, and "bun:test" for workflow tests (from Bun's types). The "atomic/_/…" modules are internal.`,
      "",
    ].join("\n");
    return `${header}\n${out.join("\n")}\n${ambient.join("\n")}\n${[...internal.values()].join("\n")}`;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
  const text = sdkDeclarations(pkg.version);
  const outfile = process.argv[2];
  if (outfile) writeFileSync(outfile, text);
  else process.stdout.write(text);
}

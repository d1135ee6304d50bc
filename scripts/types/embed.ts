/**
 * What scripts/build.ts embeds in the binary for `atomic init`, `atomic
 * types` and `atomic check`: the source that replaces
 * src/cli/project/build-embeds.ts in the build, whose exports are the
 * paths of files embedded with `with { type: "file" }`, so no process pays
 * to load them until a command reads one:
 *
 * - `declarations`: the SDK's declarations as one file (declarations.ts);
 * - `compiler`: the TypeScript compiler (the native `tsc` of the typescript
 *   package the project depends on, for the build's target; zstd-compressed) and a gzipped
 *   JSON of the files it needs beside it: its lib.*.d.ts, and the Bun and
 *   Node type packages a workflow's `Bun.*`, `process` and `node:*` need
 *   (@types/bun, bun-types, @types/node, undici-types). Absent (null) when
 *   the target's compiler package is not installed: npm installs only this
 *   machine's, so a cross-compiled binary has none (docs/design/types-and-check.md).
 */

import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { sdkDeclarations } from "./declarations.ts";

const ROOT = join(import.meta.dir, "..", "..");
const MODULES = join(ROOT, "node_modules");

/** The type packages a checked workflow may use, copied under node_modules/ beside the compiler. */
const TYPE_PACKAGES = ["@types/bun", "bun-types", "@types/node", "undici-types"];

/** `bun-linux-x64-baseline` → `linux-x64`. */
function platformOf(target: string): string {
  const [, os, arch] = /^bun-([a-z]+)-([a-z0-9]+)/.exec(target) ?? [];
  if (!os || !arch) throw new Error(`cannot tell the platform of the build target ${target}`);
  return `${os}-${arch}`;
}

function filesUnder(dir: string, keep: (rel: string) => boolean, base = dir): string[] {
  const found: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) found.push(...filesUnder(path, keep, base));
    else if (keep(relative(base, path))) found.push(path);
  }
  return found;
}

/** The typescript package's version (the compiler embedded). */
export function typescriptVersion(): string {
  return (JSON.parse(readFileSync(join(MODULES, "typescript", "package.json"), "utf8")) as { version: string }).version;
}

/** Writes the embedded files to `scratch` and returns the module's source. */
export function embeddedTypescriptModule(target: string, scratch: string, atomicVersion: string): string {
  const declarations = join(scratch, "atomic.d.ts");
  writeFileSync(declarations, sdkDeclarations(atomicVersion));
  const lines = [`import declarations from ${JSON.stringify(declarations)} with { type: "file" };`, "export { declarations };"];
  const pkg = join(MODULES, "@typescript", `typescript-${platformOf(target)}`, "lib");
  const exe = join(pkg, "tsc");
  if (!existsSync(exe)) {
    lines.push("export const compiler = null;");
    return lines.join("\n");
  }
  const files: Record<string, string> = {};
  for (const lib of readdirSync(pkg).filter((f) => f.startsWith("lib.") && f.endsWith(".d.ts"))) files[lib] = readFileSync(join(pkg, lib), "utf8");
  for (const name of TYPE_PACKAGES) {
    const dir = join(MODULES, name);
    for (const path of filesUnder(dir, (rel) => rel === "package.json" || (rel.endsWith(".d.ts") && !rel.startsWith("docs/")))) {
      files[join("node_modules", name, relative(dir, path))] = readFileSync(path, "utf8");
    }
  }
  // The executable goes in zstd-compressed (level 9: 24 MB becomes 8.4 MB in half a second of build time; the
  // first check pays about 0.1 s to unpack it). The digest is of the uncompressed executable, as unpacked.
  const packedExe = join(scratch, "tsc.zst");
  writeFileSync(packedExe, Bun.zstdCompressSync(readFileSync(exe), { level: 9 }));
  const bundle = join(scratch, "typescript-files.json.gz");
  writeFileSync(bundle, Bun.gzipSync(JSON.stringify(files)));
  const digest = new Bun.CryptoHasher("sha256").update(readFileSync(exe)).update(readFileSync(bundle)).digest("hex");
  lines.push(
    `import exe from ${JSON.stringify(packedExe)} with { type: "file" };`,
    `import files from ${JSON.stringify(bundle)} with { type: "file" };`,
    `export const compiler = { exe, files, version: ${JSON.stringify(typescriptVersion())}, sha256: ${JSON.stringify(digest)} };`,
  );
  return lines.join("\n");
}

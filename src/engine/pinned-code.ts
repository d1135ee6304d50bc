/**
 * A run's pinned code (docs/design/engine.md, "Pinned code"): what a run
 * records of its workflow when it starts, and how a later drive gets it
 * back.
 *
 * - `collectCode(entry)`: the workflow file and every local module it
 *   imports, found by following its static and literal dynamic imports
 *   (Bun's transpiler lists them) that resolve to files outside any
 *   node_modules. A manifest names each by its path relative to the
 *   entry's directory and its sha256; the manifest's own sha256 is the
 *   code version the run records (as its workflow digest). Unchanged code
 *   gives the same version wherever the files are: the paths are
 *   relative.
 * - `pinnedManifest(journal, version)`: the run's manifest, or undefined for
 *   a run recorded before pinning (or a builtin): those load their file.
 * - `materializeCode(...)`: writes the pinned files under
 *   `$ATOMIC_HOME/code/<version>/`, mirroring the original absolute paths
 *   so relative imports resolve as they did, with links to the
 *   node_modules directories the original tree had (packages are not
 *   pinned), and returns the entry's path there. A version is written
 *   once, to a temporary directory renamed into place, and reused.
 *
 * Pinning costs one read and hash of each local file and one journal
 * write per run start; nothing per step.
 */

import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, extname, isAbsolute, join, relative, resolve, sep } from "node:path";
import type { CodeFile, CodeManifest } from "../journal/code.ts";
import { parseManifest } from "../journal/code.ts";
import type { Journal } from "../journal/journal.ts";
import { UsageError } from "../shared/errors.ts";

export interface PinnedCode {
  /** The manifest's sha256: the run's code version. */
  version: string;
  manifest: CodeManifest;
  /** The manifest and every file, as stored. */
  files: CodeFile[];
}

/** Files whose imports are followed (others, JSON or text, are pinned as they are). */
const SCANNED = new Set([".ts", ".mts", ".cts", ".tsx", ".js", ".mjs", ".cjs", ".jsx"]);

let transpiler: Bun.Transpiler | undefined;

function sha256(content: Uint8Array | string): string {
  return new Bun.CryptoHasher("sha256").update(content).digest("hex");
}

/** The short form of a code version that `runs` and the status page show. */
export function shortVersion(version: string): string {
  return version.slice(0, 10);
}

/** The workflow file `entry` (absolute) and its local imports, with their manifest. */
export function collectCode(entry: string): PinnedCode {
  const base = dirname(entry);
  const files: CodeFile[] = [];
  const byPath: Record<string, string> = {};
  const seen = new Set<string>();
  const queue = [entry];
  while (queue.length > 0) {
    const path = queue.pop()!;
    if (seen.has(path)) continue;
    seen.add(path);
    const content = new Uint8Array(readFileSync(path));
    const digest = sha256(content);
    byPath[relative(base, path)] = digest;
    files.push({ digest, content });
    if (!SCANNED.has(extname(path).toLowerCase())) continue;
    for (const next of localImports(path, content)) if (!seen.has(next)) queue.push(next);
  }
  const manifest: CodeManifest = { entry: relative(base, entry), files: sortedKeys(byPath) };
  const text = new TextEncoder().encode(JSON.stringify(manifest));
  const version = sha256(text);
  return { version, manifest, files: [{ digest: version, content: text }, ...files] };
}

function sortedKeys(o: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.keys(o).sort().map((k) => [k, o[k]!]));
}

/** The files `path` imports by a relative or absolute specifier, outside node_modules. */
function localImports(path: string, content: Uint8Array): string[] {
  transpiler ??= new Bun.Transpiler({ loader: "tsx" });
  let imports: { path: string }[];
  try {
    imports = transpiler.scanImports(new TextDecoder().decode(content));
  } catch {
    return []; // a file Bun cannot parse fails when it is imported, with its own message
  }
  const out: string[] = [];
  for (const { path: spec } of imports) {
    if (!spec.startsWith(".") && !isAbsolute(spec)) continue;
    let found: string;
    try {
      found = Bun.resolveSync(spec, dirname(path));
    } catch {
      continue; // a missing module fails the import itself, with Bun's message
    }
    if (!found.split(sep).includes("node_modules") && existsSync(found)) out.push(found);
  }
  return out;
}

/** The manifest stored under the run's code version, or undefined when the run's code is not pinned. */
export async function pinnedManifest(journal: Journal, version: string): Promise<CodeManifest | undefined> {
  if (!/^[0-9a-f]{64}$/.test(version)) return undefined;
  const stored = (await journal.code.get([version])).get(version);
  return stored ? parseManifest(stored) : undefined;
}

/** The code a run is pinned to, as it was collected (to pin another run to it: a fork of a run whose file is gone). */
export async function storedCode(journal: Journal, version: string): Promise<{ code: PinnedCode; byPath: Map<string, Uint8Array> } | undefined> {
  const manifest = await pinnedManifest(journal, version);
  if (!manifest) return undefined;
  const byPath = await pinnedFiles(journal, manifest);
  const files: CodeFile[] = [{ digest: version, content: new TextEncoder().encode(JSON.stringify(manifest)) }];
  for (const [path, content] of byPath) files.push({ digest: manifest.files[path]!, content });
  return { code: { version, manifest, files }, byPath };
}

/** The pinned files by their paths relative to the entry's directory; throws naming the first one the journal no longer holds. */
export async function pinnedFiles(journal: Journal, manifest: CodeManifest): Promise<Map<string, Uint8Array>> {
  const digests = [...new Set(Object.values(manifest.files))];
  const stored = await journal.code.get(digests);
  const out = new Map<string, Uint8Array>();
  for (const [path, digest] of Object.entries(manifest.files)) {
    const content = stored.get(digest);
    if (!content) {
      throw new UsageError("pinned_code_missing", `the journal no longer holds ${path} (${digest.slice(0, 12)}) of the code this run is pinned to`, {
        hint: "move the run to the current file: atomic resume RUN --upgrade",
      });
    }
    out.set(path, content);
  }
  return out;
}

/**
 * Writes the pinned code of `version` (whose workflow file was `originalEntry`) under `home`
 * and returns the entry's path there.
 */
export function materializeCode(home: string, version: string, manifest: CodeManifest, files: ReadonlyMap<string, Uint8Array>, originalEntry: string): string {
  const root = join(home, "code", version);
  const entryDir = join(root, dirname(resolve(originalEntry)));
  const entry = join(entryDir, manifest.entry);
  if (existsSync(join(root, ".complete"))) return entry;
  const temp = `${root}.${process.pid}.${Date.now()}.tmp`;
  const tempEntryDir = join(temp, dirname(resolve(originalEntry)));
  try {
    for (const [path, content] of files) {
      const target = resolve(tempEntryDir, path);
      if (!target.startsWith(temp + sep)) throw new Error(`pinned path ${path} leaves the code directory`);
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, content);
    }
    linkNodeModules(dirname(resolve(originalEntry)), temp);
    writeFileSync(join(temp, ".complete"), "");
    mkdirSync(dirname(root), { recursive: true });
    renameSync(temp, root);
  } catch (err) {
    rmSync(temp, { recursive: true, force: true });
    // Another process put the same version in place first: theirs is as good.
    if (!existsSync(join(root, ".complete"))) throw err;
  }
  return entry;
}

/** Every node_modules on the way up from the original directory, linked at the same place in the copy. */
function linkNodeModules(dir: string, temp: string): void {
  for (let d = dir; ; d = dirname(d)) {
    const modules = join(d, "node_modules");
    if (existsSync(modules)) {
      const link = join(temp, modules);
      mkdirSync(dirname(link), { recursive: true });
      if (!existsSync(link)) symlinkSync(modules, link);
    }
    if (dirname(d) === d) break;
  }
}

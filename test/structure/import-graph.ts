/**
 * The import graph of src/, read by the TypeScript compiler itself (its
 * API, typescript/unstable/async: the parser tsc uses, so every form of
 * import counts: `import`, `import type`, `export … from`, `import()`,
 * `typeof import(…)`), and the two checks docs/design/layers.md asks for:
 *
 * - `backArrows`: imports that run back up the layering (a folder may
 *   import its own files and folders of layers below it, never a sibling of
 *   its own layer nor anything above);
 * - `circles`: groups of files that import each other in a loop, type-only
 *   imports included.
 *
 * Bun's own import scan (Bun.Transpiler.scanImports) is not enough here:
 * it drops type-only imports, and most file circles are made of those.
 */

import { existsSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { API } from "typescript/unstable/async";

/** One import: `from` and `to` are paths from the repository root (src/…); `typeOnly` for `import type`. */
export interface ImportEdge {
  from: string;
  to: string;
  typeOnly: boolean;
}

/** How the tsconfig maps a bare name to a file of src/ (its `paths`). */
const PATH_ALIASES: Record<string, string> = { atomic: "src/sdk/index.ts" };

/** Every import of a file under src/ that names a file of the repository, as the compiler parses it. */
export async function readImports(root: string): Promise<ImportEdge[]> {
  const api = new API({ cwd: root });
  try {
    const snapshot = await api.updateSnapshot({ openProject: join(root, "tsconfig.json") });
    const project = (await snapshot.getProjects())[0];
    if (!project) throw new Error(`the compiler found no project in ${root}/tsconfig.json`);
    const names = (await project.program.getSourceFileNames()).filter((n) => n.startsWith(join(root, "src") + "/"));
    const files = await Promise.all(names.map((n) => project.program.getSourceFile(n)));
    const edges: ImportEdge[] = [];
    for (const file of files) {
      if (!file) continue;
      const from = relative(root, file.fileName);
      for (const spec of file.imports) {
        const text = (spec as unknown as { text: string }).text;
        const to = resolveSpecifier(root, from, text);
        if (to === undefined) continue;
        const decl = spec.parent as unknown as { isTypeOnly?: boolean; importClause?: { isTypeOnly?: boolean } } | undefined;
        edges.push({ from, to, typeOnly: Boolean(decl?.isTypeOnly || decl?.importClause?.isTypeOnly) });
      }
    }
    return edges;
  } finally {
    await api.close();
  }
}

/** The repository file a specifier names, from the root; undefined for packages and runtime modules (node:, bun:). */
function resolveSpecifier(root: string, from: string, text: string): string | undefined {
  if (PATH_ALIASES[text]) return PATH_ALIASES[text];
  if (!text.startsWith(".")) return undefined;
  const base = resolve(root, dirname(from), text);
  for (const candidate of [base, `${base}.ts`, join(base, "index.ts")]) {
    if (existsSync(candidate) && statSync(candidate).isFile()) return relative(root, candidate);
  }
  return relative(root, base);
}

/** The folder of src/ a file belongs to ("engine" for src/engine/steps/stage.ts; "main.ts" for src/main.ts); undefined outside src/. */
export function folderOf(path: string): string | undefined {
  const m = /^src\/([^/]+)/.exec(path);
  return m?.[1];
}

export interface BackArrow extends ImportEdge {
  why: string;
}

/**
 * The imports that break the layering: `layers` lists the folders of src/
 * from the top down, each layer a list of folders that may import any
 * folder of a lower layer and none of their own layer or above. A file
 * outside src/ may be imported only if `outside` allows it.
 */
export function backArrows(edges: readonly ImportEdge[], layers: readonly (readonly string[])[], outside: (path: string) => boolean): BackArrow[] {
  const layerOf = new Map<string, number>();
  layers.forEach((folders, i) => folders.forEach((f) => layerOf.set(f, i)));
  const found: BackArrow[] = [];
  for (const edge of edges) {
    const a = folderOf(edge.from);
    const b = folderOf(edge.to);
    if (a === undefined) continue;
    if (b === undefined) {
      if (!outside(edge.to)) found.push({ ...edge, why: `src/ may not import ${edge.to} (outside src/)` });
      continue;
    }
    if (a === b) continue;
    const la = layerOf.get(a);
    const lb = layerOf.get(b);
    if (la === undefined) found.push({ ...edge, why: `src/${a} is in no layer: add it to docs/design/layers.md and this test` });
    else if (lb === undefined) found.push({ ...edge, why: `src/${b} is in no layer: add it to docs/design/layers.md and this test` });
    else if (lb <= la) found.push({ ...edge, why: `${a}/ may not import ${b}/ (${lb === la ? "a sibling in its own layer" : "a layer above it"})` });
  }
  return found;
}

/**
 * Groups of files that import each other in a loop: two files are in one
 * group when each reaches the other by imports (each group sorted; a file
 * that imports itself is a group of one). The graph is a few hundred
 * files, so every file's reach is simply walked.
 */
export function circles(edges: readonly ImportEdge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const { from, to } of edges) {
    if (!next.has(from)) next.set(from, []);
    next.get(from)!.push(to);
  }
  const reach = new Map<string, Set<string>>();
  for (const start of next.keys()) {
    const seen = new Set<string>();
    const todo = [...next.get(start)!];
    while (todo.length > 0) {
      const file = todo.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      todo.push(...(next.get(file) ?? []));
    }
    reach.set(start, seen);
  }
  const grouped = new Set<string>();
  const found: string[][] = [];
  for (const [file, reached] of reach) {
    if (grouped.has(file) || !reached.has(file)) continue;
    const group = [...reached].filter((other) => reach.get(other)?.has(file)).sort();
    for (const member of group) grouped.add(member);
    found.push(group);
  }
  return found;
}

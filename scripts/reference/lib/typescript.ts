/**
 * The TypeScript compiler for the reference pages: one project
 * (scripts/reference/tsconfig.json: the SDK's entry and the status app, and
 * what they import), opened on first use through the compiler's API
 * (`typescript/unstable/async`, which drives the compiler's own process)
 * and shared by every page; `closeTypeScript()` ends it.
 *
 * Pages read declarations, types and doc comments through the checker and
 * walk syntax trees the compiler parsed: no page parses TypeScript itself.
 */

import { join } from "node:path";
import { API, type Checker, type Project } from "typescript/unstable/async";
import type { Node, SourceFile } from "typescript/unstable/ast";
import { ROOT } from "./pages.ts";

let api: API | undefined;
let project: Promise<Project> | undefined;

export function typescriptProject(): Promise<Project> {
  project ??= (async () => {
    api = new API({ cwd: ROOT });
    const snapshot = await api.updateSnapshot({ openProject: join(ROOT, "scripts/reference/tsconfig.json") });
    const found = snapshot.getProjects()[0];
    if (!found) throw new Error("the TypeScript compiler opened no project for scripts/reference/tsconfig.json");
    return found;
  })();
  return project;
}

export async function closeTypeScript(): Promise<void> {
  const open = api;
  api = undefined;
  project = undefined;
  await open?.close();
}

export async function sourceFile(path: string): Promise<{ file: SourceFile; checker: Checker; project: Project }> {
  const p = await typescriptProject();
  const file = await p.program.getSourceFile(join(ROOT, path));
  if (!file) throw new Error(`the TypeScript project has no file ${path}`);
  return { file, checker: p.checker, project: p };
}

/** The node's own source text, without the comments and blank space before it. */
export function nodeText(file: SourceFile, node: Node): string {
  return stripLeadingTrivia(file.text.slice(node.pos, node.end));
}

/** The `//` and `/* … *\/` comments right above a node (blank lines end them), as plain text. */
export function leadingComment(file: SourceFile, node: Node): string {
  const trivia = file.text.slice(node.pos, node.end);
  const lead = trivia.slice(0, trivia.length - stripLeadingTrivia(trivia).length);
  const blocks = lead.split(/\n[ \t]*\n/);
  const last = (blocks[blocks.length - 1] ?? "").trim();
  if (!last) return "";
  return last
    .split("\n")
    .map((l) => l.trim().replace(/^\/\*\*?|\*\/$|^\*(?!\/)|^\/\/+/g, "").trim())
    .filter(Boolean)
    .join(" ")
    .trim();
}

function stripLeadingTrivia(text: string): string {
  let i = 0;
  for (;;) {
    while (i < text.length && /\s/.test(text[i]!)) i++;
    if (text.startsWith("//", i)) {
      const nl = text.indexOf("\n", i);
      i = nl < 0 ? text.length : nl + 1;
    } else if (text.startsWith("/*", i)) {
      const end = text.indexOf("*/", i + 2);
      i = end < 0 ? text.length : end + 2;
    } else break;
  }
  return text.slice(i);
}

/** Every node under `node`, depth first. */
export function walk(node: Node, visit: (n: Node) => void): void {
  visit(node);
  node.forEachChild((child) => {
    walk(child, visit);
    return undefined;
  });
}

/**
 * The documentation as the docs tests read it: README.md, every page under
 * docs/ and bench/README.md, parsed with Bun's Markdown parser
 * (`Bun.markdown.render`); heading ids are made from each heading's text by
 * github-slugger, as GitHub makes them (duplicates numbered -1, -2, ...).
 *
 * Two conventions make documentation executable:
 * - A ```console block is a shell session: each line starting with `$ ` is
 *   a command, the lines after it (up to the next `$ `) its output, stdout
 *   and stderr together. In the output, a line `...` stands for any number
 *   of lines, and `...` inside a line for any text.
 * - A ```ts block whose first line is `// file: NAME` is a file the
 *   page's console blocks use: it is written as NAME in their directory
 *   before they run.
 */

import GithubSlugger from "github-slugger";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { ROOT } from "../../scripts/binary.ts";

export interface CodeBlock {
  language: string | undefined;
  text: string;
}

export interface ParsedPage {
  /** Relative to the repository root. */
  path: string;
  headingIds: Set<string>;
  links: string[];
  code: CodeBlock[];
}

/** README.md, docs/**\/*.md and bench/README.md (when it exists). */
export function documentationFiles(): string[] {
  const files = ["README.md"];
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith(".md")) files.push(path);
    }
  };
  if (existsSync(join(ROOT, "docs"))) walk("docs");
  if (existsSync(join(ROOT, "bench", "README.md"))) files.push("bench/README.md");
  return files.sort();
}

export function parsePage(path: string): ParsedPage {
  const page: ParsedPage = { path, headingIds: new Set(), links: [], code: [] };
  const slugger = new GithubSlugger();
  const text = (children: string) => children;
  Bun.markdown.render(
    readFileSync(join(ROOT, path)),
    {
      // Inline parts render as their text, so a heading's children are its text.
      codespan: text,
      strong: text,
      emphasis: text,
      heading: (children) => {
        page.headingIds.add(slugger.slug(children));
        return children;
      },
      link: (children, meta) => {
        page.links.push(meta.href);
        return children;
      },
      code: (children, meta) => {
        page.code.push({ language: meta?.language, text: children });
        return children;
      },
    },
  );
  return page;
}

export function repoPath(abs: string): string {
  return relative(ROOT, abs);
}

export interface ConsoleStep {
  command: string;
  expected: string[];
}

/** The commands of a ```console block and the output each shows. */
export function consoleSteps(text: string): ConsoleStep[] {
  const steps: ConsoleStep[] = [];
  for (const line of text.replace(/\n$/, "").split("\n")) {
    if (line.startsWith("$ ")) steps.push({ command: line.slice(2), expected: [] });
    else if (steps.length) steps[steps.length - 1]!.expected.push(line);
    else throw new Error(`a console block must start with a "$ " command line, not ${JSON.stringify(line)}`);
  }
  return steps;
}

/** Whether `actual` is what `expected` shows (`...` lines and `...` within lines as described above). */
export function outputMatches(expected: string[], actual: string): boolean {
  const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const parts = expected.map((line) => (line === "..." ? "(?:[^\\n]*(?:\\n|$))*?" : `${line.split("...").map(escape).join("[^\\n]*")}\\n`));
  const text = actual.endsWith("\n") || actual === "" ? actual : `${actual}\n`;
  return new RegExp(`^${parts.join("")}$`).test(text);
}

/** The files a page's ```ts blocks declare (`// file: NAME` on their first line). */
export function declaredFiles(page: ParsedPage): { name: string; text: string }[] {
  return page.code
    .filter((c) => c.language === "ts")
    .map((c) => ({ m: /^\/\/ file: (\S+)[^\n]*\n/.exec(c.text), text: c.text }))
    .filter((c) => c.m)
    .map((c) => ({ name: c.m![1]!, text: c.text }));
}

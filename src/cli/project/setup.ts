/**
 * `atomic init` and `atomic types`: the files that let an editor and a plain
 * `tsc --noEmit` resolve `import { workflow } from "atomic"` in a project.
 *
 * - `.atomic/types/atomic.d.ts`: the SDK's declarations as one file
 *   (embedded.ts), rewritten by both commands;
 * - `tsconfig.json`: includes that file (its ambient `declare module
 *   "atomic"` is what resolves the import, as the binary's "atomic" module
 *   does at run time: engine/loader.ts) and the workflows; an existing one
 *   is never touched: the lines to add are printed instead;
 * - `.atomic/workflows/summarize.ts`: an example agent workflow, and its
 *   test `summarize.test.ts` (atomic/testing), each written only when no
 *   file of that name exists.
 */

import { accessSync, chmodSync, constants, existsSync, readFileSync, writeFileSync } from "node:fs";
import { mkdirsForUser, userFileMode } from "../../shared/private-files.ts";
import { join, relative, resolve } from "node:path";
import { UsageError, ensureError } from "../../shared/errors.ts";
import { sdkDeclarations } from "./embedded.ts";
// The file's text, not the module (the bundler embeds it verbatim).
import example from "./example-workflow.ts" with { type: "text" };
// @ts-expect-error -- a text import: the bundler gives the file's text, though the module has no default export
import exampleTest from "./example-workflow.test.ts" with { type: "text" };

export const DECLARATIONS_PATH = join(".atomic", "types", "atomic.d.ts");
export const EXAMPLE_PATH = join(".atomic", "workflows", "summarize.ts");
export const EXAMPLE_TEST_PATH = join(".atomic", "workflows", "summarize.test.ts");

/** The compiler options `atomic init` writes, and `atomic check` uses. */
export const COMPILER_OPTIONS = {
  target: "ESNext",
  module: "Preserve",
  moduleResolution: "bundler",
  lib: ["ESNext", "DOM"],
  strict: true,
  skipLibCheck: true,
  noEmit: true,
  allowImportingTsExtensions: true,
} as const;

const INCLUDE = ["**/*.ts", ".atomic/**/*.ts"];

export function tsconfigText(): string {
  return `${JSON.stringify({ compilerOptions: COMPILER_OPTIONS, include: INCLUDE }, null, 2)}\n`;
}

/** What a command wrote (relative paths) and what it left for the user to do. */
export interface SetupReport {
  wrote: { path: string; what: string }[];
  kept: { path: string; what: string }[];
  advice: string[];
}

function ensureWritable(dir: string, shown: string): void {
  try {
    mkdirsForUser(dir);
    accessSync(dir, constants.W_OK);
  } catch (err) {
    throw new UsageError("not_writable", `cannot write to ${shown}: ${ensureError(err).message.replace(/^\w+: /, "")}`, {
      hint: "give a directory you can write to: atomic init DIR",
    });
  }
}

/** A project file, with the modes the user's umask gives (atomic's own files are private: shared/private-files.ts). */
function write(dir: string, rel: string, text: string): void {
  mkdirsForUser(join(dir, rel, ".."));
  writeFileSync(join(dir, rel), text);
  chmodSync(join(dir, rel), userFileMode());
}

/** Writes the declarations under `dir`; returns the relative path written. */
export async function writeTypes(dir: string): Promise<string> {
  ensureWritable(dir, dir);
  write(dir, DECLARATIONS_PATH, await sdkDeclarations());
  return DECLARATIONS_PATH;
}

export async function initProject(target: string): Promise<SetupReport> {
  const dir = resolve(target);
  const shown = relative(process.cwd(), dir) || ".";
  ensureWritable(dir, shown);
  const report: SetupReport = { wrote: [], kept: [], advice: [] };
  await writeTypes(dir);
  report.wrote.push({ path: DECLARATIONS_PATH, what: "the declarations of atomic's SDK" });
  const tsconfig = join(dir, "tsconfig.json");
  if (existsSync(tsconfig)) {
    const included = readFileSync(tsconfig, "utf8").includes(".atomic");
    report.kept.push({ path: "tsconfig.json", what: "exists; left as it is" });
    if (!included) {
      report.advice.push(
        'so that tsc and editors resolve "atomic", add the declarations and the workflows to its "include":',
        `  "include": [${[...INCLUDE].map((p) => JSON.stringify(p)).join(", ")}]`,
      );
    }
  } else {
    write(dir, "tsconfig.json", tsconfigText());
    report.wrote.push({ path: "tsconfig.json", what: 'resolves "atomic" to the declarations' });
  }
  const examples = [
    { path: EXAMPLE_PATH, text: example as unknown as string, what: "an example agent workflow" },
    { path: EXAMPLE_TEST_PATH, text: (exampleTest as unknown as string).replace('"./example-workflow.ts"', '"./summarize.ts"'), what: "its test (atomic test .atomic/workflows)" },
  ];
  for (const e of examples) {
    if (existsSync(join(dir, e.path))) report.kept.push({ path: e.path, what: "exists; left as it is" });
    else {
      write(dir, e.path, e.text);
      report.wrote.push({ path: e.path, what: e.what });
    }
  }
  return report;
}

/**
 * `atomic check FILE…` and `atomic run --check`: is each file a workflow
 * that will run?
 *
 * 1. Types: one run of the TypeScript compiler the binary carries
 *    (embedded.ts) over all the files, with the SDK's declarations and the
 *    Bun and Node types, the options `atomic init` writes (setup.ts) and no
 *    tsconfig of the user's: no node_modules, no network. Each error
 *    becomes `file:line:col: message`.
 * 2. Loading: the file is imported as `atomic run` imports it
 *    (engine/loader.ts; its top-level code runs) and must default-export a
 *    workflow, with a valid name and a valibot schema for each input under
 *    a name `--input NAME=VALUE` can give. It loads while the compiler
 *    runs; for a file with type errors only those are reported.
 *
 * A file that is not there, or not TypeScript or JavaScript, is a usage
 * error (exit 2) before anything runs.
 */

import { join, relative, resolve } from "node:path";
import { describeInputs } from "../../engine/inputs.ts";
import { checkWorkflowPath, loadWorkflowFile } from "../../engine/loader.ts";
import { childEnv } from "../../shared/config/environment.ts";
import { AtomicError, ensureError } from "../../shared/errors.ts";
import type { CliSession } from "../session.ts";
import { compiler, declarationsFile } from "./embedded.ts";
import { COMPILER_OPTIONS } from "./setup.ts";

export interface CheckResult {
  file: string;
  /** `file:line:col: message` (or `file: message` without a place), one per error. */
  errors: string[];
  /** With no errors: `workflow NAME (inputs …)`. */
  summary?: string;
}

/**
 * tsc's command-line form of the options `atomic init` writes, but for the library: ESNext alone, as the Bun
 * types declare the web globals Bun has (`fetch`, `Blob`, `AbortSignal`; the DOM library `init` names for a
 * project without them would also admit `document`, which no workflow has) and parsing the DOM library's 2.3 MB
 * took a good part of a check's time.
 */
function compilerFlags(): string[] {
  const flags: string[] = [];
  for (const [key, value] of Object.entries({ ...COMPILER_OPTIONS, lib: ["ESNext"] })) {
    if (key === "noEmit") continue;
    flags.push(`--${key}`);
    if (value !== true) flags.push(Array.isArray(value) ? value.join(",") : String(value));
  }
  return [...flags, "--noEmit", "--pretty", "false", "--ignoreConfig"];
}

const DIAGNOSTIC = /^(.+?)\((\d+),(\d+)\): error (TS\d+): (.*)$/;

/** tsc's `file(line,col): error TSn: message` lines (continuations indented) as `file:line:col: message`, by file. */
export function parseDiagnostics(output: string, cwd: string): Map<string, string[]> {
  const byFile = new Map<string, string[]>();
  let last: string[] | undefined;
  let lastIndex = -1;
  for (const line of output.split("\n")) {
    const m = DIAGNOSTIC.exec(line);
    if (m) {
      const path = resolve(cwd, m[1]!);
      const list = byFile.get(path) ?? [];
      byFile.set(path, list);
      list.push(`${relative(cwd, path)}:${m[2]}:${m[3]}: ${m[5]} (${m[4]})`);
      last = list;
      lastIndex = list.length - 1;
    } else if (last && /^\s+\S/.test(line)) {
      last[lastIndex] += ` ${line.trim()}`;
    } else if (line.trim()) {
      const list = byFile.get("") ?? [];
      byFile.set("", list);
      list.push(line.trim());
    }
  }
  return byFile;
}

/** An input name `--input NAME=VALUE` can give. */
const INPUT_NAME = /^[A-Za-z_][A-Za-z0-9_.-]*$/;

function isSchema(value: unknown): boolean {
  return typeof value === "object" && value !== null && (value as { kind?: unknown }).kind === "schema" && typeof (value as { "~run"?: unknown })["~run"] === "function";
}

async function loadCheck(file: string): Promise<CheckResult> {
  try {
    const { definition } = await loadWorkflowFile(file);
    const errors: string[] = [];
    const inputs = definition.inputs ?? {};
    for (const [name, schema] of Object.entries(inputs)) {
      if (!INPUT_NAME.test(name)) errors.push(`${file}: input name ${JSON.stringify(name)} cannot be given as --input ${name}=VALUE (use letters, digits, _, . and -, starting with a letter)`);
      if (!isSchema(schema)) errors.push(`${file}: input ${JSON.stringify(name)} is not a valibot schema (write it with v, e.g. ${name}: v.string())`);
    }
    if (errors.length) return { file, errors };
    const described = describeInputs(inputs).map((i) => `${i.name}: ${i.type}${i.required ? "" : " optional"}`);
    return { file, errors: [], summary: `workflow ${definition.name} (${described.length ? `inputs ${described.join(", ")}` : "no inputs"})` };
  } catch (err) {
    const e = ensureError(err) as Error & { hint?: string };
    const message = e.message.replace(/\.$/, "").replace(`${file} `, "it ");
    return { file, errors: [`${file}: ${message}${e.hint ? ` (${e.hint})` : ""}`] };
  }
}

/** Checks each file; usage errors (a missing file, not a workflow file) are thrown before anything runs. */
export async function checkWorkflows(files: readonly string[]): Promise<CheckResult[]> {
  for (const f of files) checkWorkflowPath(f);
  const cwd = process.cwd();
  const tsc = await compiler();
  const declarations = await declarationsFile();
  const args = [tsc.tsc, ...compilerFlags(), "--typeRoots", join(tsc.typesRoot, "node_modules", "@types"), "--types", "bun", ...files.map((f) => resolve(f)), declarations];
  // The compiler runs while the files load (a check takes the longer of the two, not their sum).
  const proc = Bun.spawn(args, { cwd, stdin: "ignore", stdout: "pipe", stderr: "pipe", env: childEnv() });
  const compiled = Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  const loaded: CheckResult[] = [];
  for (const file of files) loaded.push(await loadCheck(file));
  const [stdout, stderr, exitCode] = await compiled;
  const output = `${stdout}${stderr}`;
  if (exitCode !== 0 && !output.split("\n").some((l) => DIAGNOSTIC.test(l))) {
    throw new Error(`the TypeScript compiler (${tsc.tsc}) failed: ${output.trim().split("\n")[0] || `exit code ${exitCode}`}`);
  }
  const diagnostics = parseDiagnostics(output, cwd);
  // A file's type errors come first: what loading it said is of no use until they are fixed.
  const results = files.map((file, i) => {
    const errors = diagnostics.get(resolve(file)) ?? [];
    return errors.length ? { file, errors } : loaded[i]!;
  });
  // Errors the compiler gave for no file of the user's (an option, a declaration file) go with the first file.
  const other = [...diagnostics].filter(([path]) => !files.some((f) => resolve(f) === path)).flatMap(([, list]) => list);
  if (other.length && results[0]) results[0].errors.push(...other);
  return results;
}

/** Prints the results; a failed check is an error of its own (exit 1) after the per-file lines. */
export function reportChecks(s: CliSession, results: CheckResult[]): void {
  for (const r of results) {
    if (s.globals.json) s.json({ file: r.file, ok: r.errors.length === 0, errors: r.errors, ...(r.summary ? { workflow: r.summary } : {}) });
    else if (r.errors.length === 0) s.result(`ok: ${r.summary}`);
    else for (const e of r.errors) s.result(e);
  }
  const failed = results.filter((r) => r.errors.length > 0);
  if (failed.length) {
    const count = failed.reduce((n, r) => n + r.errors.length, 0);
    throw new AtomicError("check_failed", `${count} error${count === 1 ? "" : "s"} in ${failed.map((r) => r.file).join(", ")}`, "terminal", {
      hint: `fix ${count === 1 ? "it" : "them"} and run atomic check again`,
      exitCode: 1,
    });
  }
}

/**
 * What names a workflow on a command line or in a request: a file path, the
 * name of a file in `.atomic/workflows/` (a registered workflow), or a
 * builtin's name. A registered workflow wins over a builtin of the same name.
 */

import { existsSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { BUILTIN_PREFIX, builtinSource } from "./builtins.ts";

/**
 * `atomic run triage` finds `.atomic/workflows/triage.ts` when no file of
 * that name exists, else the builtin of that name (`builtin:triage`): a
 * local workflow wins over a builtin.
 */
export function resolveWorkflowArg(arg: string): string {
  if (existsSync(arg) || arg.includes("/")) return arg;
  return resolveWorkflowName(arg, process.cwd()) ?? arg;
}

/** A registered workflow under `cwd` or a builtin, by name; undefined when there is neither. */
export function resolveWorkflowName(name: string, cwd: string): string | undefined {
  const named = resolve(cwd, localWorkflowPath(name));
  // Relative when it is under this process's directory: error messages name it as the user wrote it.
  if (existsSync(named)) return resolve(cwd) === process.cwd() ? localWorkflowPath(name) : named;
  if (builtinSource(name) !== undefined) return `${BUILTIN_PREFIX}${name}`;
  return undefined;
}

export function localWorkflowPath(name: string): string {
  return join(".atomic", "workflows", name.endsWith(".ts") ? name : `${name}.ts`);
}

/**
 * The workflow files of a `.atomic/workflows/` directory, sorted: its `.ts` files but the tests beside
 * them (`*.test.ts`, `*.spec.ts`, as `atomic init` writes one), which are no workflows.
 */
export function registeredWorkflowFiles(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".ts") && !/\.(test|spec)\.ts$/.test(f)).sort() : [];
}

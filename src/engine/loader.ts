/**
 * Loading a user's workflow file.
 *
 * The binary registers the SDK as a virtual module named "atomic" before
 * it imports the file, so `import { workflow, v } from "atomic"` resolves
 * from anywhere on disk, to the very instance the engine uses. Bun
 * transpiles the file at import time; its relative imports resolve as
 * usual. The file's default export must be a workflow.
 *
 * A file's digest is its code version (pinned-code.ts): the sha256 of the
 * manifest of the file and every local module it imports. The run records
 * it with that code, and a later drive loads the pinned code back
 * (`loadPinnedWorkflow`) unless it is told to move the run to the current
 * file (`resume --upgrade`, `--workflow`). Runs recorded before pinning
 * hold the sha256 of the file alone and load the file as it is now.
 *
 * `builtin:<name>` names a workflow shipped in the binary (builtins.ts):
 * the reference a run of a builtin records, so resume finds it again.
 */

import { existsSync, readFileSync, statSync } from "node:fs";
import { registeredWorkflowFiles } from "./workflow-names.ts";
import { extname, join, resolve } from "node:path";
import * as sdk from "../sdk/index.ts";
import { isWorkflow } from "../sdk/workflow.ts";
import type { WorkflowDefinition } from "../sdk/types.ts";
import { AtomicError, UsageError, ensureError } from "../shared/errors.ts";
import { closeMatches } from "../shared/close-matches.ts";
import { BUILTIN_PREFIX, builtinDigest, builtinNames, builtinSource, withBuiltinFile } from "./builtins.ts";
import type { Journal } from "../journal/journal.ts";
import { collectCode, materializeCode, shortVersion, storedCode, type PinnedCode } from "./pinned-code.ts";
import { codeLoading } from "./code-loading.ts";

/** The names `atomic run NAME` accepts here: the builtins and the files in .atomic/workflows/. */
function workflowNames(): string[] {
  const dir = join(process.cwd(), ".atomic", "workflows");
  const local = registeredWorkflowFiles(dir).map((f) => f.slice(0, -3));
  return [...local, ...builtinNames()];
}

/**
 * What a workflow file may be. Bun imports much else (JSON, TOML, text,
 * a file without an extension as JavaScript); a workflow is code, so any
 * other file is refused before anything of it runs.
 */
const WORKFLOW_EXTENSIONS = [".ts", ".mts", ".cts", ".tsx", ".js", ".mjs", ".cjs", ".jsx"];

/** True when `file` is named like a workflow file (TypeScript or JavaScript). */
export function hasWorkflowExtension(file: string): boolean {
  return WORKFLOW_EXTENSIONS.includes(extname(file).toLowerCase());
}

let registered = false;

export function registerSdkModule(): void {
  if (registered) return;
  registered = true;
  Bun.plugin({
    name: "atomic-sdk",
    setup(build) {
      build.module("atomic", () => ({ loader: "object", exports: { ...sdk, default: sdk } }));
    },
  });
}

export interface LoadedWorkflow {
  definition: WorkflowDefinition;
  path: string;
  digest: string;
  /** A file's code, to pin a new run to (a builtin has none: it is part of the binary). */
  code?: PinnedCode;
}

export function fileDigest(path: string): string {
  return new Bun.CryptoHasher("sha256").update(readFileSync(path)).digest("hex");
}

export async function loadWorkflowFile(file: string): Promise<LoadedWorkflow> {
  if (file.startsWith(BUILTIN_PREFIX)) return loadBuiltin(file.slice(BUILTIN_PREFIX.length));
  const path = checkWorkflowPath(file);
  const definition = await importWorkflow(path, file);
  const code = collectCode(path);
  return { definition, path, digest: code.version, code };
}

/**
 * The workflow a run is pinned to (its code version `version`, recorded
 * from the file `recordedPath`), loaded from a copy of the pinned files;
 * undefined when the run's code is not pinned. `path` stays the recorded one.
 */
export async function loadPinnedWorkflow(journal: Journal, home: string, version: string, recordedPath: string): Promise<LoadedWorkflow | undefined> {
  if (recordedPath.startsWith(BUILTIN_PREFIX)) return undefined;
  const stored = await storedCode(journal, version);
  if (!stored) return undefined;
  const entry = materializeCode(home, version, stored.code.manifest, stored.byPath, recordedPath);
  const definition = await importWorkflow(entry, `${recordedPath} (pinned ${shortVersion(version)})`);
  return { definition, path: recordedPath, digest: version, code: stored.code };
}

// The driver loads a chain's next run through these (code-loading.ts).
codeLoading.loader = { file: loadWorkflowFile, pinned: loadPinnedWorkflow };

/** The absolute path of a workflow file; a usage error when it is missing, not a file or not TypeScript or JavaScript. */
export function checkWorkflowPath(file: string): string {
  const path = resolve(file);
  if (!existsSync(path)) {
    const near = file.includes("/") ? [] : closeMatches(file, workflowNames(), 3);
    throw new UsageError("workflow_not_found", `workflow file ${file} does not exist`, {
      hint: near.length
        ? `did you mean ${near.join(", ")}? (\`atomic workflows\` lists the builtins and the workflows in .atomic/workflows/)`
        : "check the path; `atomic workflows` lists the workflows in .atomic/workflows/",
    });
  }
  if (!statSync(path).isFile()) {
    throw new UsageError("workflow_not_found", `${file} is not a file`, { hint: "pass the path of a .ts workflow file" });
  }
  if (!hasWorkflowExtension(path)) {
    throw new UsageError("not_a_workflow_file", `${file} is not a TypeScript or JavaScript file`, {
      hint: `a workflow file ends in ${WORKFLOW_EXTENSIONS.join(", ")}`,
    });
  }
  return path;
}

/** A builtin by name, recorded as `builtin:<name>` with the digest of its embedded source. */
export async function loadBuiltin(name: string): Promise<LoadedWorkflow> {
  if (builtinSource(name) === undefined) {
    const near = closeMatches(name, builtinNames(), 3);
    throw new UsageError("workflow_not_found", `this atomic has no builtin workflow named ${JSON.stringify(name)}`, {
      hint: near.length ? `did you mean ${near.join(", ")}? (\`atomic workflows\` lists the builtins)` : "`atomic workflows` lists the builtins",
    });
  }
  const definition = await withBuiltinFile(name, (path) => importWorkflow(path, `builtin ${name}`));
  return { definition, path: `${BUILTIN_PREFIX}${name}`, digest: builtinDigest(name) };
}

async function importWorkflow(path: string, file: string): Promise<WorkflowDefinition> {
  registerSdkModule();
  let mod: Record<string, unknown>;
  try {
    mod = (await import(path)) as Record<string, unknown>;
  } catch (err) {
    if (err instanceof AtomicError) throw err;
    throw loadError(file, err);
  }
  const definition = mod.default;
  if (!isWorkflow(definition)) {
    throw new UsageError("no_workflow", `${file} does not export a workflow as its default export`, {
      hint: 'end the file with: export default workflow({ name: "...", async run(ctx) { ... } })',
    });
  }
  return definition;
}

/** One sentence naming the file and, when Bun says it, the line. */
function loadError(file: string, err: unknown): UsageError {
  const e = ensureError(err) as Error & {
    position?: { line?: number; column?: number; lineText?: string };
    errors?: { message?: string; position?: { line?: number; column?: number } }[];
  };
  // Bun reports build errors as an AggregateError of BuildMessages carrying a position.
  const first = e.errors?.[0] ?? e;
  const message = (first.message ?? e.message).split("\n")[0] ?? "";
  const position = (first as { position?: { line?: number; column?: number } }).position ?? e.position;
  const where = position?.line ? ` at line ${position.line}${position.column ? `, column ${position.column}` : ""}` : lineFromStack(e, file);
  return new UsageError("workflow_load_failed", `could not load ${file}${where}: ${message}`, {
    hint: "fix the file and run again",
    cause: err,
  });
}

function lineFromStack(e: Error, file: string): string {
  const path = resolve(file);
  const m = e.stack?.split("\n").find((l) => l.includes(path))?.match(/:(\d+):(\d+)\)?$/);
  return m ? ` at line ${m[1]}, column ${m[2]}` : "";
}

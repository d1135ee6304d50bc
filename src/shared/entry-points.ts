/**
 * The modules the binary bundles apart: scripts/build.ts makes each an
 * entry point (a bundle of its own) and code loads them with
 * `importEntry`, by a specifier the bundler cannot follow, so no other
 * bundle holds a copy.
 *
 * Why: a process pays to load its whole bundle at start, whatever it then
 * runs, about 8 ms of CPU per MB here. With one bundle of 1.2 MB every
 * process of a run (root, pool coordinator, workers, intercom broker)
 * spent about 10 ms just starting, and a run starts up to six at once
 * while its first stages wait for them. Now a worker loads about 80 KB,
 * the coordinator about 110 KB; Kysely (290 KB, migrations and run
 * listings only) loads in the processes that need it, when they do; so
 * does ajv with the JSON Schema converter (about 165 KB), in processes
 * that run a stage with a structured-output schema; the MCP SDK (with its
 * own ajv) in the stage MCP server and `atomic mcp`; ink and React in the
 * terminal console; playwright-core (about 18 MB, with its own ajv) where
 * a workflow captures a page in Chromium.
 *
 * Inside the binary the entry points keep their paths under src/, next to
 * main.ts (`Bun.main`); from source they are files under src/.
 */

import { dirname, join } from "node:path";
import { isCompiled } from "./self-exec.ts";

export const ENTRY_POINTS = [
  "main.ts",
  "cli/app.ts",
  "pool/coordinator.ts",
  "pool/worker.ts",
  "intercom/broker.ts",
  "journal/sqlite/kysely-layer.ts",
  "journal/postgres/postgres-journal.ts",
  "journal/postgres/pg-listings.ts",
  "runners/json-schema-ajv.ts",
  "testing/kit.ts",
  "runners/sandbox/net-init.ts",
  "pool/stage-mcp.ts",
  "pool/stage-tool-call.ts",
  "cli/tui/entry.ts",
  "cli/mcp/server.ts",
  "sdk/playwright.ts",
  "sdk/capture-role.ts",
] as const;

export type EntryPoint = Exclude<(typeof ENTRY_POINTS)[number], "main.ts">;

export async function importEntry(entry: EntryPoint): Promise<Record<string, unknown>> {
  const base = isCompiled() ? dirname(Bun.main) : join(import.meta.dir, "..");
  const specifier: string = join(base, entry);
  return (await import(specifier)) as Record<string, unknown>;
}

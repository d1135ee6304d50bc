/**
 * How the driver loads workflow code for a chain's next run
 * (ctx.continueAsNew: driver.ts handOver, continuation): loader.ts fills
 * this in when it is imported, as every process that loads workflow files
 * does (the CLI's run and resume). The driver does not import loader.ts
 * itself: the SDK's declarations reach the driver through the test kit,
 * and the loader would bring the builtins' sources into them. Without a
 * loader (the test kit's runs have no file) the next run keeps the code
 * of the run before it.
 */

import type { Journal } from "../journal/journal.ts";
import type { WorkflowDefinition } from "../sdk/types.ts";
import type { PinnedCode } from "./pinned-code.ts";

export interface LoadedCode {
  definition: WorkflowDefinition;
  path: string;
  digest: string;
  code?: PinnedCode;
}

export interface CodeLoading {
  /** A workflow file as it is now (loader.ts loadWorkflowFile). */
  file(path: string): Promise<LoadedCode>;
  /** The code a run is pinned to (loader.ts loadPinnedWorkflow); undefined when none is stored. */
  pinned(journal: Journal, home: string, version: string, recordedPath: string): Promise<LoadedCode | undefined>;
}

export const codeLoading: { loader?: CodeLoading } = {};

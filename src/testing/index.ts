/**
 * `atomic/testing`: what a workflow's test imports (./test-run.ts; its
 * options and result in ./types.ts).
 */

export { testRun } from "./test-run.ts";
export type * from "./types.ts";
export type { RunExport } from "./run-export.ts";

/**
 * Node built-in modules that only some stages need, loaded on first use.
 *
 * A process loads its whole bundle at start, and a bundle's `import` of a
 * built-in instantiates it then: node:child_process, with the stream
 * modules it pulls in, was about 2 ms of CPU in each worker's start, and a
 * worker that runs shell stages never uses it (the shell runner spawns with
 * Bun.spawn). The agent runners (the openai runner's bash tool, the CLI
 * agents) get it from here when they first start a process.
 */

import type * as ChildProcessModule from "node:child_process";

let childProcessModule: typeof ChildProcessModule | undefined;

export function childProcess(): typeof ChildProcessModule {
  return (childProcessModule ??= require("node:child_process") as typeof ChildProcessModule);
}

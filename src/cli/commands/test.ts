/**
 * `atomic test [FILES|DIR]`: runs workflow tests (`*.test.ts` and the other
 * names Bun's test runner takes) with Bun's test runner, from inside the
 * binary: nothing to install. Test files import `testRun` from
 * "atomic/testing" and their workflows from "atomic" (../test-kit.ts says
 * how those resolve). The output, the summary and the exit code are
 * `bun test`'s. A directory (default: the current one) is searched for
 * test files, outside node_modules and hidden directories; no test file
 * at all is a usage error.
 */

import { defineCommand } from "citty";
import { existsSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { UsageError } from "../../shared/errors.ts";
import { childEnv } from "../../shared/config/environment.ts";
import { removeTree } from "../../shared/remove-tree.ts";
import { isCompiled } from "../../shared/self-exec.ts";
import { session } from "../session.ts";
import { writeTestKit } from "../test-kit.ts";

/** The names Bun's test runner picks up in a directory. */
const TEST_FILES = new Bun.Glob("**/*{.test,_test,.spec,_spec}.{ts,tsx,mts,cts,js,jsx,mjs,cjs}");
const SKIPPED = /(^|\/)(node_modules|\.[^/]+)\//;

export default defineCommand({
  meta: { name: "test", description: "Run workflow tests (*.test.ts) with Bun's test runner, atomic/testing included" },
  args: {
    paths: { type: "positional", valueHint: "FILES|DIR…", description: "test files or directories (default: the current directory)", required: false },
    testNamePattern: { type: "string", alias: "t", description: "run only the tests whose name matches this regular expression" },
    timeout: { type: "string", description: "per-test timeout in ms (bun test's default: 5000)" },
  },
  async run({ args }) {
    const s = session();
    const paths = (args._ as string[]).length ? (args._ as string[]) : ["."];
    const files = paths.flatMap(testFilesIn);
    if (files.length === 0) {
      const where = paths.length === 1 ? paths[0]! : paths.join(", ");
      throw new UsageError("no_test_files", `no test files in ${where}`, {
        hint: "a test file is named like review.test.ts; write one with testRun from \"atomic/testing\" (docs/guides/testing-workflows.md)",
      });
    }
    const kit = writeTestKit();
    try {
      const flags = [
        ...(args.testNamePattern !== undefined ? ["--test-name-pattern", args.testNamePattern] : []),
        ...(args.timeout !== undefined ? ["--timeout", args.timeout] : []),
      ];
      const child = Bun.spawn([process.execPath, "test", "--preload", kit.preload, ...flags, ...files], {
        stdio: ["inherit", "inherit", "inherit"],
        // Compiled, this binary is Bun's CLI when BUN_BE_BUN is set; from source process.execPath is bun already.
        env: { ...childEnv(), ...(isCompiled() ? { BUN_BE_BUN: "1" } : {}) },
      });
      const forward = (sig: NodeJS.Signals) => child.kill(sig);
      process.on("SIGINT", forward);
      process.on("SIGTERM", forward);
      try {
        s.exitCode = await child.exited;
      } finally {
        process.off("SIGINT", forward);
        process.off("SIGTERM", forward);
      }
    } finally {
      removeTree(kit.dir);
    }
  },
});

/** The test files a path names: itself (a file), or those under it (a directory). */
function testFilesIn(path: string): string[] {
  if (!existsSync(path)) {
    throw new UsageError("no_test_files", `${path} does not exist`, { hint: "give a test file (review.test.ts) or a directory holding some" });
  }
  const full = resolve(path);
  if (statSync(full).isFile()) return [full];
  return [...TEST_FILES.scanSync({ cwd: full, dot: false, followSymlinks: false })]
    .filter((f) => !SKIPPED.test(f))
    .sort()
    .map((f) => join(full, f));
}

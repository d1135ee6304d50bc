/**
 * Every ```console block of the documentation runs, and prints what it
 * shows (the conventions are in markdown.ts). Each page's blocks run in
 * order in one fresh directory with its own ATOMIC_HOME, with `atomic` on
 * PATH being dist/atomic, after the page's `// file: NAME` blocks were
 * written there. A command runs with /bin/sh, its stderr into its stdout.
 */

import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { atomicBin } from "../../scripts/binary.ts";
import { childEnv, TEST_CONFIG } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { consoleSteps, declaredFiles, documentationFiles, outputMatches, parsePage } from "./markdown.ts";

const pages = documentationFiles()
  .map(parsePage)
  .filter((p) => p.code.some((c) => c.language === "console"));

const running = new Set<Bun.Subprocess>();
afterEach(async () => {
  for (const p of running) p.kill("SIGKILL");
  await Promise.all([...running].map((p) => p.exited));
  running.clear();
  removeTempDirs();
});

async function sh(command: string, cwd: string, env: Record<string, string>): Promise<string> {
  const proc = Bun.spawn(["/bin/sh", "-c", `exec 2>&1\n${command}`], { cwd, env, stdout: "pipe", stderr: "ignore", stdin: "ignore" });
  running.add(proc);
  const timer = setTimeout(() => proc.kill("SIGKILL"), 90_000);
  const out = await new Response(proc.stdout).text();
  await proc.exited;
  clearTimeout(timer);
  running.delete(proc);
  return out;
}

describe("runnable documentation", () => {
  test("README.md has runnable blocks", () => {
    expect(pages.map((p) => p.path)).toContain("README.md");
  });

  for (const page of pages) {
    test(`${page.path}: every console block prints what it shows`, async () => {
      const dir = makeTempDir("atomic-docs-");
      const home = join(dir, "home");
      const bin = join(dir, "bin");
      const cwd = join(dir, "work");
      const tmp = join(dir, "tmp");
      for (const d of [bin, cwd, tmp]) mkdirSync(d, { mode: 0o700 });
      symlinkSync(atomicBin(), join(bin, "atomic"));
      for (const f of declaredFiles(page)) writeFileSync(join(cwd, f.name), f.text);
      const env = childEnv({ PATH: `${bin}:${process.env.PATH ?? ""}`, ATOMIC_HOME: home, ATOMIC_CONFIG: TEST_CONFIG, NO_COLOR: "1", TMPDIR: tmp, XDG_RUNTIME_DIR: tmp, COLUMNS: "120" });
      const failures: string[] = [];
      for (const block of page.code.filter((c) => c.language === "console")) {
        for (const step of consoleSteps(block.text)) {
          const out = await sh(step.command, cwd, env);
          if (!outputMatches(step.expected, out)) failures.push(`$ ${step.command}\n--- shown:\n${step.expected.join("\n")}\n--- printed:\n${out}`);
        }
      }
      expect(failures).toEqual([]);
    }, 300_000);
  }

  test("the output matcher: `...` lines and `...` within a line", () => {
    expect(outputMatches(["started run ... (hello)", "...", "done"], "started run 01ab (hello)\na\nb\ndone\n")).toBe(true);
    expect(outputMatches(["started run ... (hello)", "...", "done"], "started run 01ab (hello)\ndone\n")).toBe(true);
    expect(outputMatches(["a", "b"], "a\nc\n")).toBe(false);
    expect(outputMatches(["a"], "a\nb\n")).toBe(false);
    expect(outputMatches(["x (1.5) [y]"], "x (1.5) [y]\n")).toBe(true);
    expect(consoleSteps("$ one\nout\n$ two\n")).toEqual([
      { command: "one", expected: ["out"] },
      { command: "two", expected: [] },
    ]);
  });
});

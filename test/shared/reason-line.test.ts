/**
 * reasonLine (src/shared/reason-line.ts), the line of a failed process's
 * stderr that a failure sentence quotes: a real Bun process that dies of an
 * uncaught error (what an internal role does when something inside it
 * rejects unhandled) reads as its error line, not as Bun's version line or
 * a stack frame; a plain last line as itself, cut at its bound; a missing
 * or empty log as "".
 */

import { afterAll, expect, test } from "bun:test";
import { openSync, closeSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { reasonLine } from "../../src/shared/reason-line.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterAll(removeTempDirs);

test("a crashed Bun process's stderr reads as its error line; a plain one as its last line, bounded; none as empty", async () => {
  const dir = makeTempDir("atomic-reason-line-");
  const crashed = join(dir, "crashed.log");
  const fd = openSync(crashed, "w");
  try {
    const child = Bun.spawn([process.execPath, "-e", 'async function f() { throw Object.assign(new Error("the browser pipe closed"), { code: "EPIPE", errno: 32 }) }\nf();\nsetTimeout(() => {}, 60_000);'], { stdin: "ignore", stdout: "ignore", stderr: fd });
    expect(await child.exited).toBe(1);
  } finally {
    closeSync(fd);
  }
  expect(reasonLine(crashed)).toBe("error: the browser pipe closed");

  const plain = join(dir, "plain.log");
  writeFileSync(plain, `starting\nbwrap: Can't find source path /gone: No such file or directory\n\n`);
  expect(reasonLine(plain)).toBe("bwrap: Can't find source path /gone: No such file or directory");
  writeFileSync(plain, `${"x".repeat(500)}\n`);
  expect(reasonLine(plain, 40)).toBe(`${"x".repeat(39)}…`);

  writeFileSync(plain, "");
  expect(reasonLine(plain)).toBe("");
  expect(reasonLine(join(dir, "missing.log"))).toBe("");
  expect(reasonLine(undefined)).toBe("");
});

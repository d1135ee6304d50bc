/**
 * The ready pipe (src/shared/ready-pipe.ts), between real processes: the
 * starter reads "ready" once the child says so (the child goes on after),
 * "closed" when the child ends without saying it, and a child whose starter
 * is gone goes on (the write's EPIPE is ignored). Nothing the child starts
 * inherits the fd or the variable naming it.
 */

import { expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { READY_FD, readyLine } from "../../src/shared/ready-pipe.ts";
import { withTempDir } from "../helpers/temp.ts";

const module = join(import.meta.dir, "../../src/shared/ready-pipe.ts");

/** A child that takes its fd, then does what `script` says (`tell()`, `fds()`: what a grandchild holds). */
function child(dir: string, script: string) {
  const file = join(dir, "child.ts");
  writeFileSync(
    file,
    `import { takeReadyFd, tellStarter as tell } from ${JSON.stringify(module)};
import { spawnSync } from "node:child_process";
takeReadyFd();
const fds = () => spawnSync("sh", ["-c", "ls /proc/$$/fd; echo env=$ATOMIC_READY_FD"], { encoding: "utf8" }).stdout;
// Waits for the test's SIGUSR1 (the interval keeps the process alive meanwhile).
const usr1 = () => new Promise<void>((r) => { const t = setInterval(() => {}, 1 << 30); process.once("SIGUSR1", () => { clearInterval(t); r(); }); process.stdout.write("waiting\\n"); });
${script}`,
  );
  const proc = spawn(process.execPath, [file], { cwd: dir, env: { ...process.env, ATOMIC_READY_FD: String(READY_FD) }, stdio: ["ignore", "pipe", "inherit", "pipe"] });
  const exited = new Promise<number | null>((resolve) => proc.once("exit", resolve));
  let out = "";
  const listening = new Promise<void>((resolve) =>
    proc.stdout!.setEncoding("utf8").on("data", (d: string) => {
      out += d;
      if (out.includes("waiting\n")) resolve();
    }),
  );
  return { proc, pipe: proc.stdio[READY_FD] as Readable, exited, out: () => out, listening };
}

test("ready once the child says so; what it starts holds neither the fd nor the variable", async () => {
  await withTempDir(async (dir) => {
    const c = child(dir, `tell(); process.stdout.write(fds());`);
    expect(await readyLine(c.pipe, 60_000)).toBe("ready");
    expect(await c.exited).toBe(0);
    const lines = c.out().trim().split("\n");
    expect(lines.filter((l) => /^\d+$/.test(l)).map(Number).sort()).toEqual([0, 1, 2]);
    expect(lines.at(-1)).toBe("env=");
  });
});

test("closed when the child ends without saying it", async () => {
  await withTempDir(async (dir) => {
    const c = child(dir, `process.exit(3);`);
    expect(await readyLine(c.pipe, 60_000)).toBe("closed");
    expect(await c.exited).toBe(3);
  });
});

test("a child whose starter stopped listening goes on after telling", async () => {
  await withTempDir(async (dir) => {
    const marker = join(dir, "went-on");
    const c = child(dir, `await usr1(); tell(); (await import("node:fs")).writeFileSync(${JSON.stringify(marker)}, "yes");`);
    c.pipe.destroy();
    await c.listening;
    c.proc.kill("SIGUSR1");
    expect(await c.exited).toBe(0);
    expect(readFileSync(marker, "utf8")).toBe("yes");
  });
});

test("timeout when the child says nothing in time (the pipe is let go)", async () => {
  await withTempDir(async (dir) => {
    const c = child(dir, `await usr1();`);
    expect(await readyLine(c.pipe, 50)).toBe("timeout");
    await c.listening;
    c.proc.kill("SIGUSR1");
    expect(await c.exited).toBe(0);
  });
});

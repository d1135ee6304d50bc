/**
 * The temp-dir helper's removal (temp.ts): a process still running with a
 * removed directory in its environment is killed and fails the removal,
 * named by its command line; one that ends by itself meanwhile (its parent
 * was just killed) does not; an intercom broker is killed without failing;
 * a process naming another directory (even one sharing the name's prefix)
 * is left alone.
 */

import { afterEach, expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { isLive } from "./processes.ts";
import { makeTempDir, removeTempDir, removeTempDirs } from "./temp.ts";

const started: Subprocess<"pipe", "pipe", "inherit">[] = [];

afterEach(async () => {
  for (const p of started) p.kill("SIGKILL");
  await Promise.all(started.map((p) => p.exited));
  started.length = 0;
  removeTempDirs();
});

/**
 * A shell that waits on its stdin (no child of its own), with `env` and extra arguments on its command line; returned
 * once it has said so, so its environment and command line are the shell's (a fork not yet exec'd shows this process's).
 */
async function waiting(env: Record<string, string>, ...args: string[]): Promise<Subprocess<"pipe", "pipe", "inherit">> {
  const p = Bun.spawn(["sh", "-c", "echo up; read line", "sh", ...args], { env: { PATH: process.env.PATH ?? "", ...env }, stdin: "pipe", stdout: "pipe" });
  started.push(p);
  await p.stdout.getReader().read();
  return p;
}

test("a process left running under a removed dir is killed, and the removal fails naming its command line", async () => {
  const dir = makeTempDir();
  const home = join(dir, "home");
  mkdirSync(home);
  const p = await waiting({ ATOMIC_HOME: home }, "logs-follow-stand-in");
  expect(() => removeTempDir(dir)).toThrow(/1 process\(es\) still ran .*\n  pid \d+ under .*: sh -c echo up; read line sh logs-follow-stand-in/);
  expect(isLive(p.pid)).toBe(false);
  expect(await p.exited).not.toBe(0);
  expect(existsSync(dir)).toBe(false);
}, 30_000);

test("a path list naming the dir counts too (PATH=dir/bin:…)", async () => {
  const dir = makeTempDir();
  const p = await waiting({ PATH: `${join(dir, "bin")}:${process.env.PATH ?? ""}` });
  expect(() => removeTempDirs()).toThrow(`pid ${p.pid} under ${dir}`);
}, 30_000);

test("a process that ends by itself while removal waits (its parent was just killed) fails nothing", async () => {
  const dir = makeTempDir();
  // It ends when its stdin closes, as a coordinator ends when its root is gone.
  const p = await waiting({ ATOMIC_HOME: join(dir, "home") });
  p.stdin.end();
  removeTempDir(dir);
  expect(existsSync(dir)).toBe(false);
});

test("an intercom broker of the dir is killed without failing the removal", async () => {
  const dir = makeTempDir();
  const p = await waiting({ ATOMIC_HOME: join(dir, "home") }, "--internal-intercom-broker");
  removeTempDir(dir);
  expect(isLive(p.pid)).toBe(false);
  expect(existsSync(dir)).toBe(false);
});

test("a process naming another dir, even one whose name starts with this one's, is left alone", async () => {
  const dir = makeTempDir();
  const other = await waiting({ ATOMIC_HOME: `${dir}-other/home`, OTHER: `${dir}x` });
  removeTempDir(dir);
  expect(isLive(other.pid)).toBe(true);
});

/**
 * The umask split of shared/private-files.ts in one process: after
 * enterPrivateUmask, what atomic creates is private, while the files an
 * agent's write tool and its `output` option create in the stage's cwd
 * (and their new parent directories) get the user's umask, as does a spawned stage process.
 */

import { afterEach, expect, test } from "bun:test";
import { mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { enterPrivateUmask, spawnWithUserUmask } from "../../src/shared/private-files.ts";
const USER_UMASK_ENV = "ATOMIC_USER_UMASK";
import { ConfinedFs } from "../../src/runners/openai/confined-fs.ts";
import { writeOutputFile } from "../../src/runners/agent-files.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const savedUmask = process.umask();
const savedEnv = process.env[USER_UMASK_ENV];
afterEach(() => {
  process.umask(savedUmask);
  if (savedEnv === undefined) delete process.env[USER_UMASK_ENV];
  else process.env[USER_UMASK_ENV] = savedEnv;
  removeTempDirs();
});

test("atomic's own files are private; an agent's new files and a stage's get the user's umask", async () => {
  process.env[USER_UMASK_ENV] = "0022"; // as a parent atomic process recorded it
  enterPrivateUmask();
  expect(process.umask()).toBe(0o077);
  const dir = makeTempDir();
  mkdirSync(join(dir, "ours"));
  expect(statSync(join(dir, "ours")).mode & 0o777).toBe(0o700);

  const fs = new ConfinedFs(dir);
  fs.writeText(fs.resolve("a/b/report.txt"), "hi\n");
  expect(statSync(join(dir, "a")).mode & 0o777).toBe(0o755);
  expect(statSync(join(dir, "a", "b")).mode & 0o777).toBe(0o755);
  expect(statSync(join(dir, "a", "b", "report.txt")).mode & 0o777).toBe(0o644);

  // the task's `output` file, written for the agent
  await writeOutputFile({ cwd: dir, artifactDir: `${dir}/artifacts`, agent: { output: "out/answer.txt" } }, "42\n", undefined);
  expect(statSync(join(dir, "out")).mode & 0o777).toBe(0o755);
  expect(statSync(join(dir, "out", "answer.txt")).mode & 0o777).toBe(0o644);

  const proc = spawnWithUserUmask(() => Bun.spawnSync(["/bin/sh", "-c", "umask"]));
  expect(proc.stdout.toString().trim()).toBe("0022");
  expect(process.umask()).toBe(0o077);
});

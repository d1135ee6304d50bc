/**
 * A shell stage's stdin pipe (src/runners/shell/stdin-pipe.ts), with real
 * processes reading it: messages arrive whole and in order, the reader sees
 * end-of-file when it is closed, a reader that does not read never blocks
 * the writer (what the pipe cannot take is written later), and a reader
 * that is gone costs nothing. Then through the shell runner: the messages
 * sent before a stage started come first on its stdin, then those sent while
 * it runs.
 */

import { afterEach, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { StdinPipe } from "../../src/runners/shell/stdin-pipe.ts";
import { ShellRunner } from "../../src/runners/shell/shell-runner.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterEach(() => removeTempDirs());

function reader(script: string, pipe: StdinPipe, cwd: string) {
  const proc = Bun.spawn(["/bin/sh", "-c", script], { cwd, stdin: pipe.readFd, stdout: "ignore", stderr: "ignore" });
  pipe.spawned();
  return proc;
}

async function waitFor(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await Bun.sleep(10);
  }
}

test("what is written arrives whole and in order, and closing it is the reader's end-of-file", async () => {
  const dir = makeTempDir("atomic-stdin-");
  const pipe = StdinPipe.open()!;
  expect(pipe).toBeDefined();
  const proc = reader("cat > got", pipe, dir);
  pipe.write("first\n");
  pipe.write("second ü\n");
  pipe.close();
  pipe.close();
  expect(await proc.exited).toBe(0);
  expect(readFileSync(join(dir, "got"), "utf8")).toBe("first\nsecond ü\n");
  pipe.write("after the end\n"); // dropped
});

test("a reader that does not read never blocks the writer; the rest goes in as it reads, in order", async () => {
  const dir = makeTempDir("atomic-stdin-");
  const pipe = StdinPipe.open()!;
  // Reads nothing until the file `go` exists, then everything.
  const proc = reader("while [ ! -e go ]; do sleep 0.01; done; cat > got", pipe, dir);
  const big = "x".repeat(300 * 1024);
  pipe.write(big); // far more than a pipe holds
  pipe.write("\nend\n");
  expect(proc.exitCode).toBeNull(); // the writer came back while the reader still waits
  await Bun.write(join(dir, "go"), "");
  await waitFor(() => {
    try {
      return readFileSync(join(dir, "got"), "utf8").endsWith("end\n");
    } catch {
      return false;
    }
  });
  pipe.close();
  expect(await proc.exited).toBe(0);
  expect(readFileSync(join(dir, "got"), "utf8")).toBe(`${big}\nend\n`);
});

test("a reader that has gone away: writing to it throws nothing and keeps nothing", async () => {
  const dir = makeTempDir("atomic-stdin-");
  const pipe = StdinPipe.open()!;
  const proc = reader("exit 0", pipe, dir);
  await proc.exited;
  pipe.write("nobody reads this\n".repeat(10_000));
  pipe.close();
});

function request(command: string): StageRequest {
  const dir = makeTempDir("atomic-stdin-stage-");
  return { runId: "run-x", stageKey: "0", stageName: "s", attempt: 1, runner: "shell", command, cwd: dir, artifactDir: join(dir, "attempt-1") };
}

test("through the shell runner: messages from before the start come first on the stage's stdin, then those sent while it runs", async () => {
  const req = request("read line; echo \"got: $line\"; cat > rest");
  const handle = new ShellRunner().start({ ...req, initialMessages: [{ id: "m-1", text: "hello" }] }, () => {});
  await handle.send("more", "followUp");
  await waitFor(() => {
    try {
      return readFileSync(join(req.cwd, "rest"), "utf8") === "more\n";
    } catch {
      return false;
    }
  });
  handle.cancel("enough");
  const result = await handle.result;
  expect(result.text).toContain("got: hello");
});

/**
 * A shell stage's stdin (src/runners/shell/shell-runner.ts), with real
 * stages reading it: messages arrive whole and in order, a stage that does
 * not read never blocks the sender (what the pipe cannot take goes in as it
 * reads), a stage that closed its stdin costs nothing, and the messages
 * sent before a stage started come first on its stdin, then those sent
 * while it runs.
 */

import { afterEach, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ShellRunner } from "../../src/runners/shell/shell-runner.ts";
import type { StageRequest } from "../../src/runners/types.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

import { untilExists } from "../helpers/gate.ts";
afterEach(() => removeTempDirs());

async function waitFor(check: () => boolean): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await Bun.sleep(10);
  }
}

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

test("messages arrive whole and in order, one line each", async () => {
  const req = request("head -n 2 > got");
  const handle = new ShellRunner().start(req, () => {});
  await handle.send("first", "followUp");
  await handle.send("second ü\n", "steer");
  const result = await handle.result;
  expect(result.status).toBe("completed");
  expect(readFileSync(join(req.cwd, "got"), "utf8")).toBe("first\nsecond ü\n");
});

test("a stage that does not read never blocks the sender; the rest goes in as it reads, in order", async () => {
  const big = "x".repeat(300 * 1024); // far more than a pipe holds
  const want = `${big}\nend\n`;
  // Reads nothing until the file `go` exists, then exactly what was sent.
  const req = request(`${untilExists("go")}; head -c ${Buffer.byteLength(want)} > got`);
  const handle = new ShellRunner().start(req, () => {});
  await handle.send(big, "followUp");
  await handle.send("end", "followUp");
  expect(existsSync(join(req.cwd, "got"))).toBe(false); // the sender came back while the stage still waits
  writeFileSync(join(req.cwd, "go"), "");
  const result = await handle.result;
  expect(result.status).toBe("completed");
  expect(readFileSync(join(req.cwd, "got"), "utf8")).toBe(want);
});

test("a stage that closed its stdin: sending to it throws nothing", async () => {
  const req = request(`exec 0<&-; : > closed; ${untilExists("go")}`);
  const handle = new ShellRunner().start(req, () => {});
  await waitFor(() => existsSync(join(req.cwd, "closed")));
  for (let i = 0; i < 100; i++) await handle.send("nobody reads this\n".repeat(100), "followUp");
  writeFileSync(join(req.cwd, "go"), "");
  expect((await handle.result).status).toBe("completed");
});

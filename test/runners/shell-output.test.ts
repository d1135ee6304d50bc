/**
 * The shell runner's output: the stage writes its stdout and stderr files
 * itself, and the runner reads them back as events while it runs and once
 * it has exited (src/runners/shell/output-files.ts).
 */

import { afterEach, expect, test } from "bun:test";
import { appendFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { RunnerEvent, StageRequest } from "../../src/runners/types.ts";
import { ShellRunner, TEXT_LIMIT } from "../../src/runners/shell/shell-runner.ts";
import { OutputFiles, POLL_MS } from "../../src/runners/shell/output-files.ts";
import { liveGroupCount } from "../../src/runners/shell/process-groups.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { isLive } from "../helpers/processes.ts";

import { untilExists } from "../helpers/gate.ts";
afterEach(() => {
  removeTempDirs();
  expect(liveGroupCount()).toBe(0);
});

function request(command: string): StageRequest {
  const dir = makeTempDir("atomic-shell-out-");
  return { runId: "run-x", stageKey: "0", stageName: "s", attempt: 1, runner: "shell", command, cwd: dir, artifactDir: join(dir, "attempt-1") };
}

function outputOf(events: RunnerEvent[], stream: "stdout" | "stderr"): string {
  return events.map((e) => (e.type === "output" && e.stream === stream ? e.text : "")).join("");
}

test("output arrives as events while the stage runs, not only at its end", async () => {
  const events: RunnerEvent[] = [];
  const req = request(`echo first; ${untilExists("go")}; echo second`);
  // The stage waits for a file this test writes only once "first" has arrived as an event.
  const handle = new ShellRunner().start(req, (e) => {
    events.push(e);
    if (e.type === "output" && e.text.includes("first")) writeFileSync(join(req.cwd, "go"), "");
  });
  const result = await handle.result;
  expect(result.status).toBe("completed");
  expect(outputOf(events, "stdout")).toBe("first\nsecond\n");
});

test("a character split across two writes far apart comes out whole", async () => {
  const events: RunnerEvent[] = [];
  // "é" is 0xC3 0xA9: its two bytes are written POLL_MS * 3 apart.
  const handle = new ShellRunner().start(request(`printf '\\303'; sleep ${(POLL_MS * 3) / 1000}; printf '\\251 ok\\n'`), (e) => events.push(e));
  const result = await handle.result;
  expect(result.text).toBe("é ok\n");
  expect(outputOf(events, "stdout")).toBe("é ok\n");
});

test("a large output: all of it in the file and the events, the result's text capped", async () => {
  const events: RunnerEvent[] = [];
  const req = request(`head -c ${TEXT_LIMIT * 3} /dev/zero | tr '\\0' 'a'; echo done >&2`);
  const result = await new ShellRunner().start(req, (e) => events.push(e)).result;
  expect(result.status).toBe("completed");
  expect(result.text.length).toBe(TEXT_LIMIT);
  expect(readFileSync(result.outputPath, "utf8").length).toBe(TEXT_LIMIT * 3);
  expect(outputOf(events, "stdout").length).toBe(TEXT_LIMIT * 3);
  expect(outputOf(events, "stderr")).toBe("done\n");
  expect(readFileSync(result.errorPath!, "utf8")).toBe("done\n");
});

test("a background child of the stage is killed when the stage exits; its output stops there", async () => {
  const events: RunnerEvent[] = [];
  const req = request(`(sleep 30; echo late) & echo $! > child.pid; echo now`);
  const result = await new ShellRunner().start(req, (e) => events.push(e)).result;
  expect(result.text).toBe("now\n");
  // The child is gone (killed with the stage's process group): it never writes again.
  const child = Number(readFileSync(join(req.cwd, "child.pid"), "utf8"));
  await waitUntil(() => !isLive(child), 10_000, "the stage's background child to end");
  expect(readFileSync(result.outputPath, "utf8")).toBe("now\n");
});

test("a stage quiet between its writes: the files are only watched meanwhile (no timer, no read), and every write still arrives", async () => {
  const dir = makeTempDir("atomic-shell-out-");
  const [out, err] = [join(dir, "out"), join(dir, "err")];
  let text = "";
  const files = new OutputFiles(out, err, (stream, t) => (text += `${stream}:${t}`));
  files.follow();
  try {
    for (let i = 0; i < 5; i++) {
      await waitUntil(() => files.state === "quiet", 10_000, "the follower to go quiet");
      appendFileSync(i % 2 ? err : out, `w${i}\n`);
      await waitUntil(() => text.includes(`w${i}`), 10_000, `write ${i} to arrive`);
    }
  } finally {
    files.drain(100);
  }
  expect(text).toBe("stdout:w0\nstderr:w1\nstdout:w2\nstderr:w3\nstdout:w4\n");
  expect(files.state).toBe("idle");
});

/**
 * Output is never cut short, through the real binary and real pipes: every
 * command that can print a lot (run --json, show --json, logs, runs --json,
 * inbox --json) gives a reader that starts a second late every byte, and a
 * reader that leaves after one line (`| head -1`) ends the command quietly:
 * exit 0 and nothing on stderr for a command that prints, and for `run` the
 * run stopped as interrupted (resumable, exit 130), as the README says.
 *
 * The pipelines run in bash (`cmd | (sleep 1; cat > file)`), as a user's
 * shell runs them; PIPESTATUS gives the binary's own exit code.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { atomicBin, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, listRuns, makeTempDir, parseNdjson, runCommand } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const LOUD = fixture("loud.ts");

interface Piped {
  code: number;
  stdout: string;
  stderr: string;
}

/** `atomic args | READER` in bash; the binary's exit code, what the reader kept and the binary's stderr. */
async function piped(args: string[], reader: "slow" | "head", home: string, env: Record<string, string> = {}): Promise<Piped> {
  const dir = makeTempDir();
  const [out, err, rc] = ["out", "err", "rc"].map((f) => join(dir, f)) as [string, string, string];
  const tail = reader === "slow" ? `(sleep 1; cat > "${out}")` : `head -1 > "${out}"`;
  const script = `"$@" 2> "${err}" | ${tail}; echo "\${PIPESTATUS[0]}" > "${rc}"`;
  const r = await runCommand(["bash", "-c", script, "bash", atomicBin(), ...args], {
    env: { ATOMIC_HOME: home, NO_COLOR: "1", TMPDIR: dir, ...env },
    timeoutMs: 90_000,
  });
  expect(r.stderr).toBe("");
  return { code: Number(readFileSync(rc, "utf8").trim()), stdout: readFileSync(out, "utf8"), stderr: readFileSync(err, "utf8") };
}

function artifact(home: string, runId: string, stage: string, file: string): string {
  const dir = join(home, "artifacts", runId);
  const stageDir = readdirSync(dir).find((d) => d.endsWith(`-${stage}`))!;
  return join(dir, stageDir, "attempt-1", file);
}

e2eTest(
  "a slow reader gets every byte of run --json, show --json, logs and runs --json; | head -1 ends them quietly",
  async () => {
    const home = makeTempDir();
    // run --json into a slow pipe: every line is JSON and the final result line is there.
    const run = await piped(["run", LOUD, "--json"], "slow", home);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);
    const events = parseNdjson(run.stdout);
    const result = events.at(-1)!;
    expect(result).toMatchObject({ type: "result", status: "completed", exitCode: 0, outputs: { end: "the-end" } });
    expect(((result.outputs as { text: string }).text).length).toBe(4 * 600 * 256);
    const id = result.runId as string;

    // show --json: one JSON document of megabytes, whole.
    const show = await piped(["show", id, "--json"], "slow", home);
    expect(show.code).toBe(0);
    expect(show.stderr).toBe("");
    expect(show.stdout.length).toBeGreaterThan(1_000_000);
    const report = JSON.parse(show.stdout) as { run: { outputs: { end: string } } };
    expect(report.run.outputs.end).toBe("the-end");

    // logs --stage: exactly the stage's stdout then its stderr, byte for byte.
    const stdoutLog = readFileSync(artifact(home, id, "spew", "stdout.log"), "utf8");
    const stderrLog = readFileSync(artifact(home, id, "spew", "stderr.log"), "utf8");
    expect(stdoutLog.length).toBeGreaterThan(2_000_000);
    const logs = await piped(["logs", id, "--stage", "spew"], "slow", home);
    expect(logs.code).toBe(0);
    expect(logs.stderr).toBe("");
    expect(logs.stdout.length).toBe(stdoutLog.length + stderrLog.length);
    expect(logs.stdout).toBe(stdoutLog + stderrLog);

    // logs of every stage (prefixed lines) and as JSON lines.
    const all = await piped(["logs", id], "slow", home);
    expect(all.code).toBe(0);
    const lineCount = stdoutLog.split("\n").length - 1 + (stderrLog.split("\n").length - 1);
    expect(all.stdout.split("\n").length - 1).toBe(lineCount);
    const asJson = await piped(["logs", id, "--json"], "slow", home);
    expect(parseNdjson(asJson.stdout)).toHaveLength(lineCount);

    // runs --json: each run a line of JSON, the big outputs whole.
    await runAtomic(["run", LOUD], { home, env: { LOUD_MB: "0" } });
    const runs = await piped(["runs", "--json"], "slow", home);
    expect(runs.code).toBe(0);
    const listed = parseNdjson(runs.stdout);
    expect(listed).toHaveLength(2);
    for (const r of listed) expect((r.outputs as { end: string }).end).toBe("the-end");

    // A reader that leaves after one line: exit 0, nothing on stderr.
    for (const args of [["show", id, "--json"], ["logs", id, "--stage", "spew"], ["logs", id], ["runs", "--json"], ["show", id]]) {
      const head = await piped(args, "head", home);
      expect({ args, code: head.code, stderr: head.stderr }).toEqual({ args, code: 0, stderr: "" });
      expect(head.stdout.split("\n")).toHaveLength(2);
    }
  },
  180_000,
);

e2eTest(
  "inbox --json of a live run reaches a slow reader whole; run --json | head -1 stops the run resumably",
  async () => {
    const home = makeTempDir();
    const env = { LOUD_ASK: "1", LOUD_MB: "0", LOUD_KB: "1" };
    const live = spawnAtomic(["run", LOUD], { home, env });
    const id = (await waitUntil(async () => (await listRuns(home))[0]?.id, 30_000, "the run to start")) as string;
    await waitUntil(async () => {
      const r = await runAtomic(["inbox", id, "--json"], { home });
      return r.code === 0 && (JSON.parse(r.stdout) as { prompts: unknown[] }).prompts.length === 8;
    }, 30_000, "eight open questions");
    const inbox = await piped(["inbox", id, "--json"], "slow", home);
    expect(inbox.code).toBe(0);
    expect(inbox.stderr).toBe("");
    const box = JSON.parse(inbox.stdout) as { prompts: { question: string }[] };
    expect(inbox.stdout.length).toBeGreaterThan(8 * 60_000);
    for (const p of box.prompts) expect(p.question.length).toBeGreaterThan(60_000);
    const head = await piped(["inbox", id, "--json"], "head", home);
    expect({ code: head.code, stderr: head.stderr }).toEqual({ code: 0, stderr: "" });
    expect((await runAtomic(["cancel", id], { home })).code).toBe(0);
    await live.exited;

    // The questions' events overflow the pipe after head has gone: the run stops as interrupted.
    const stopped = await piped(["run", LOUD, "--json"], "head", home, env);
    expect(stopped.stderr).toBe("");
    expect(stopped.code).toBe(130);
    expect(JSON.parse(stopped.stdout)).toMatchObject({ type: "run_started" });
    const runs = await listRuns(home);
    expect(runs[0]).toMatchObject({ status: "interrupted" });
    expect(statSync(home).isDirectory()).toBe(true);
  },
  180_000,
);

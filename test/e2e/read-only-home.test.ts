/**
 * A read-only ATOMIC_HOME (issue 13 item 16): reading commands (`runs`,
 * `show`, `logs`, `serve`) work on it as they are; commands that change
 * runs (`run`, `resume`, `cancel`, `send`) are refused with one sentence
 * saying the home is read-only and a hint naming what still works, and
 * nothing is written. The home is a read-only bind mount (root ignores
 * file modes, not a read-only mount), undone in finally.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { copyFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { CAN_MOUNT, bindReadOnly, unmountAll } from "../helpers/mounts.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  unmountAll();
});

/** A home with a failed run (its gate shut) and a completed one. */
async function homeWithRuns(): Promise<{ home: string; failed: string; completed: string }> {
  const home = makeTempDir();
  const project = makeTempDir();
  copyFileSync(fixture("place.ts"), join(project, "place.ts"));
  const gate = join(project, "gate");
  const ids: string[] = [];
  for (const open of [false, true]) {
    if (open) writeFileSync(gate, "");
    const r = await runAtomic(["run", "place.ts", "--input", `gate=${gate}`], { home, cwd: project });
    expect(r.code).toBe(open ? 0 : 1);
    ids.push(/started run (\S+)/.exec(r.stdout)![1]!);
  }
  return { home, failed: ids[0]!, completed: ids[1]! };
}

if (CAN_MOUNT) {
  e2eTest("a read-only home: runs, show, logs and serve work; run, resume, cancel and send say why they are refused", async () => {
    const { home: source, failed, completed } = await homeWithRuns();
    const m = bindReadOnly(source);
    try {
      const home = m.dir;
      const before = readdirSync(home).sort();

      const runs = await runAtomic(["runs"], { home });
      expect(runs.stderr).toBe("");
      expect(runs.code).toBe(0);
      expect(runs.stdout).toContain(failed);
      expect(runs.stdout).toContain(completed);
      const show = await runAtomic(["show", completed], { home });
      expect(show.code).toBe(0);
      expect(show.stdout).toContain("completed");
      const logs = await runAtomic(["logs", completed, "--stage", "where"], { home });
      expect(logs.code).toBe(0);
      expect(logs.stdout).toBe("here\n");

      const serve = spawnAtomic(["serve", "--port", "0"], { home });
      try {
        const line = await lineWatcher(serve.stdout).waitFor(/status page: \S+/, 30_000);
        const url = /status page: (\S+)/.exec(line)![1]!;
        const { origin, searchParams } = new URL(url);
        const api = await fetch(`${origin}/api/runs`, { headers: { authorization: `Bearer ${searchParams.get("token")}` } });
        expect(api.status).toBe(200);
        expect(JSON.stringify(await api.json())).toContain(completed);
      } finally {
        serve.kill("SIGKILL");
        await serve.exited;
      }

      for (const args of [
        ["run", fixture("place.ts"), "--input", "gate=/nonexistent"],
        ["resume", failed],
        ["cancel", failed],
        ["send", failed, "where", "hello"],
      ]) {
        const r = await runAtomic(args, { home });
        expect(r.code, args.join(" ")).toBe(2);
        const err = expectOneSentenceError(r.stderr.split("\n").filter((l) => !l.startsWith("warning:")).join("\n"));
        expect(err.message, args.join(" ")).toMatch(/^cannot write the journal at .*: the atomic home .* is read-only for this user, and this command changes runs\.$/);
        expect(err.hint).toMatch(/reading commands \(runs, show, logs, serve\) work/);
      }
      expect(readdirSync(home).sort()).toEqual(before);
    } finally {
      m.cleanup();
    }
  });
}

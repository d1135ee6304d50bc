/**
 * A read-only ATOMIC_HOME (issue 13 item 16): reading commands (`runs`,
 * `show`, `logs`, `serve`) work on it as they are; commands that change
 * runs (`run`, `resume`, `cancel`, `send`) are refused with one sentence
 * saying the home is read-only and a hint naming what still works, and
 * nothing is written. So are the console's actions through the JSON API
 * of the `atomic serve` on it (start, resume, rerun, fork, cancel, send,
 * bulk cancel and resume: 403, the same sentence), issue 29; the page
 * shows that sentence (test/status/page-read-only.test.ts). Two ways a home is read-only: a read-only bind mount
 * (root ignores file modes, not a read-only mount), undone in finally; and
 * a second Unix user reading a home root made and opened to others for
 * reading (directories 0755, files 0644), who runs a copy of the binary
 * and the workflow it can read (the checkout may be 0700).
 */

import { afterAll, afterEach, expect } from "bun:test";
import { chmodSync, copyFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { atomicBin, lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { CAN_MOUNT, bindReadOnly, unmountAll } from "../helpers/mounts.ts";
import { createOtherUser, otherUsersSupported, removeOtherUsers } from "../helpers/other-user.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  unmountAll();
  await removeOtherUsers();
});

type Run = (args: string[]) => Promise<{ code: number; stdout: string; stderr: string }>;

/** What the bind-mount and the second-user cases check the same way: reading works, writing is refused with why, nothing changes. */
async function expectReadOnlyHome(home: string, ids: { failed: string; completed: string }, atomic: Run, serve: () => { stdout: ReadableStream<Uint8Array>; kill(signal: NodeJS.Signals): void; exited: Promise<number> }, workflow: string) {
  const before = readdirSync(home).sort();
  const runs = await atomic(["runs"]);
  expect(runs.stderr).toBe("");
  expect(runs.code).toBe(0);
  expect(runs.stdout).toContain(ids.failed);
  expect(runs.stdout).toContain(ids.completed);
  const show = await atomic(["show", ids.completed]);
  expect(show.code).toBe(0);
  expect(show.stdout).toContain("completed");
  const logs = await atomic(["logs", ids.completed, "--stage", "where"]);
  expect(logs.code).toBe(0);
  expect(logs.stdout).toBe("here\n");

  const server = serve();
  try {
    const line = await lineWatcher(server.stdout).waitFor(/status page: \S+/, 30_000);
    const { origin, searchParams } = new URL(/status page: (\S+)/.exec(line)![1]!);
    const headers = { authorization: `Bearer ${searchParams.get("token")}`, "content-type": "application/json" };
    const api = await fetch(`${origin}/api/runs`, { headers });
    expect(api.status).toBe(200);
    expect(JSON.stringify(await api.json())).toContain(ids.completed);
    // every action the console has: refused in the CLI's sentence (403), the server going on serving
    const readOnly = (error: { code: string; message: string; hint: string }, what: string) => {
      expect({ what, code: error.code }).toEqual({ what, code: "storage_readonly" });
      expect(error.message, what).toMatch(/^cannot write the journal at .*: the atomic home .* is read-only for this user, and this command changes runs$/);
      expect(error.hint, what).toMatch(/reading commands \(runs, show, logs, serve\) work/);
    };
    for (const [path, body] of [
      ["/api/runs", { workflow: "goal", inputs: { goal: "x" } }],
      [`/api/runs/${ids.failed}/resume`, {}],
      [`/api/runs/${ids.failed}/rerun`, {}],
      [`/api/runs/${ids.completed}/fork`, { at: "where" }],
      [`/api/runs/${ids.failed}/control`, { action: "cancel" }],
      [`/api/runs/${ids.failed}/messages`, { stage: "where", text: "hello" }],
    ] as const) {
      const res = await fetch(`${origin}${path}`, { method: "POST", headers, body: JSON.stringify(body) });
      const answer = (await res.json()) as { error: { code: string; message: string; hint: string } };
      expect({ path, status: res.status }).toEqual({ path, status: 403 });
      readOnly(answer.error, path);
    }
    for (const action of ["cancel", "resume"]) {
      const res = await fetch(`${origin}/api/runs/bulk`, { method: "POST", headers, body: JSON.stringify({ action, runs: [ids.failed] }) });
      const answer = (await res.json()) as { results: { runId: string; ok: boolean; error: { code: string; message: string; hint: string } }[] };
      expect(answer.results.map((r) => [r.runId, r.ok])).toEqual([[ids.failed, false]]);
      readOnly(answer.results[0]!.error, `bulk ${action}`);
    }
    expect((await fetch(`${origin}/api/runs/${ids.completed}`, { headers })).status).toBe(200);
  } finally {
    // SIGTERM: runuser passes it on to the server (a SIGKILL would end runuser alone and leave the server running)
    server.kill("SIGTERM");
    await server.exited;
  }

  for (const args of [
    ["run", workflow, "--input", "gate=/nonexistent"],
    ["resume", ids.failed],
    ["cancel", ids.failed],
    ["send", ids.failed, "where", "hello"],
  ]) {
    const r = await atomic(args);
    expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(2);
    const err = expectOneSentenceError(r.stderr.split("\n").filter((l) => !l.startsWith("warning:")).join("\n"));
    expect(err.message, args.join(" ")).toMatch(/^cannot write the journal at .*: the atomic home .* is read-only for this user, and this command changes runs\.$/);
    expect(err.hint).toMatch(/reading commands \(runs, show, logs, serve\) work/);
  }
  expect(readdirSync(home).sort()).toEqual(before);
}

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
      await expectReadOnlyHome(home, { failed, completed }, (args) => runAtomic(args, { home }), () => spawnAtomic(["serve", "--port", "0"], { home }), fixture("place.ts"));
    } finally {
      m.cleanup();
    }
  });
}

if (otherUsersSupported()) {
  e2eTest("a home another user may read but not write: runs, show, logs and serve work for that user; run, resume, cancel and send say why they are refused", async () => {
    const { home, failed, completed } = await homeWithRuns();
    // root's home opened for reading (what a team does to let others look at a machine's runs), the folders above it enterable
    const tree = (dir: string): string[] => [dir, ...readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? tree(join(dir, e.name)) : [join(dir, e.name)]))];
    for (const path of tree(home)) chmodSync(path, statSync(path).isDirectory() ? 0o755 : 0o644);
    for (let dir = dirname(home); dir !== "/"; dir = dirname(dir)) if ((statSync(dir).mode & 0o005) !== 0o005) chmodSync(dir, statSync(dir).mode | 0o005);
    const other = await createOtherUser();
    // the binary and the workflow copied where that user can read them (the checkout may be 0700)
    const theirs = makeTempDir();
    chmodSync(theirs, 0o755);
    const bin = join(theirs, "atomic");
    copyFileSync(atomicBin(), bin);
    chmodSync(bin, 0o755);
    const workflow = join(theirs, "place.ts");
    copyFileSync(fixture("place.ts"), workflow);
    chmodSync(workflow, 0o644);
    const env = ["env", "-C", `/tmp/${other.name}-home`, `HOME=/tmp/${other.name}-home`, `ATOMIC_HOME=${home}`, "NO_COLOR=1", bin];
    // removed here, not in afterEach: the tests of this file run at once, and one's afterEach must not take the other's user
    try {
      await expectReadOnlyHome(
        home,
        { failed, completed },
        (args) => other.run([...env, ...args], { timeoutMs: 60_000 }),
        () => Bun.spawn(["runuser", "-u", other.name, "--", ...env, "serve", "--port", "0"], { stdin: "ignore", stdout: "pipe", stderr: "pipe" }),
        workflow,
      );
      // nothing of that user's is left running (the server ends after runuser passed the SIGTERM on)
      const left = () => Bun.spawnSync(["ps", "-o", "pid=,args=", "-u", String(other.uid)]).stdout.toString().trim();
      await waitUntil(() => left() === "", 15_000, "the other user's processes to end").catch((e) => {
        throw new Error(`${(e as Error).message}: ${left()}`);
      });
    } finally {
      await removeOtherUsers();
    }
    // the other user changed nothing of root's: every file is still root's, and the journal's modes are as opened
    for (const path of tree(home)) expect({ path, uid: statSync(path).uid }).toEqual({ path, uid: 0 });
    expect(statSync(join(home, "atomic.db")).mode & 0o777).toBe(0o644);
  });
}

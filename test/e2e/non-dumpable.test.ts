/**
 * atomic's own processes are not readable by the processes they start
 * (README "Security" → "Credentials", shared/non-dumpable.ts), through the
 * real binary run by a second Unix user: root can read every process's
 * /proc entries, so the scenario runs as a user of its own, made with
 * useradd and deleted (with every process it has left) after the file.
 *
 * A shell stage and the openai runner's `bash` tool walk up from $PPID
 * (worker, coordinator, root) and try each one's /proc/<pid>/environ and
 * /proc/<pid>/mem: denied, and the key appears nowhere in what they read.
 * What atomic reads of its own processes still works for that user: a
 * live run shows as running in `atomic runs` (which reads the root's start
 * time from /proc/<pid>/stat of a non-dumpable process), a killed root's
 * lease is taken over at once by `atomic resume`, and the intercom broker
 * starts. Without prctl, every process says so once in its log and the run
 * completes.
 */

import { afterAll, beforeAll, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { chmodSync, copyFileSync, existsSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { ROOT, atomicBin, runAtomic, waitUntil } from "../helpers/atomic.ts";
import { inOrder, startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { createOtherUser, otherUsersSupported, removeOtherUsers, type OtherUser } from "../helpers/other-user.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const KEY = `sk-secret-${randomBytes(12).toString("hex")}`;
const supported = otherUsersSupported();

let user: OtherUser;
/** The user's home: the binary, the workflows, atomic's home and the stages' working directory. */
let dir: string;
let bin: string;
/** A copy of the checkout's sources and packages that user can read (the "from source" runs). */
let source: string;
const spawned = new Set<Subprocess>();

beforeAll(async () => {
  if (!supported) return;
  user = await createOtherUser();
  dir = `/tmp/${user.name}-home`;
  // A copy it can execute and read (a binary the user cannot read would make its processes non-dumpable by itself).
  bin = join(dir, "atomic");
  copyFileSync(atomicBin(), bin);
  chmodSync(bin, 0o755);
  writeFileSync(join(dir, "peek.sh"), PEEK);
  for (const sub of ["tmp", "cwd"]) Bun.spawnSync(["mkdir", "-p", join(dir, sub)]);
  expect(Bun.spawnSync(["chown", "-R", `${user.name}:`, dir]).exitCode).toBe(0);
  // "From source" as that user: the sources and their packages, hard-linked (copied where links cannot go) into a
  // folder it can read, since the checkout may sit in one only we can enter (a clone in a 0700 temp dir). After
  // the chown above: linked files keep their owner.
  source = join(dir, "repo");
  Bun.spawnSync(["mkdir", "-m", "755", source]);
  for (const part of ["src", "node_modules", "package.json", "tsconfig.json", "bunfig.toml"]) {
    if (!existsSync(join(ROOT, part))) continue;
    const linked = Bun.spawnSync(["cp", "-al", join(ROOT, part), source]).exitCode === 0;
    if (!linked) expect(Bun.spawnSync(["cp", "-a", join(ROOT, part), source]).exitCode).toBe(0);
  }
});

afterAll(async () => {
  for (const p of spawned) p.kill("SIGKILL");
  await Promise.all([...spawned].map((p) => p.exited));
  if (user) {
    // Nothing of the user's may outlive the file: its stages, an orphaned pool, the intercom broker.
    Bun.spawnSync(["pkill", "-KILL", "-u", user.name]);
    await waitUntil(() => Bun.spawnSync(["pgrep", "-u", user.name]).exitCode !== 0, 10_000, `the processes of ${user.name} to end`);
  }
  await removeOtherUsers();
  removeTempDirs();
});

/** From the stage's parent up: each process's command line, then what reading its environment and opening its memory gave. */
const PEEK = `pid=$PPID
for role in worker coordinator root; do
  echo "== $role $pid $(tr '\\0' ' ' < /proc/$pid/cmdline)"
  cat /proc/$pid/environ 2>&1 | tr '\\0' '\\n'
  if (exec 3< /proc/$pid/mem) 2>/dev/null; then echo "mem $pid: open"; else echo "mem $pid: denied"; fi
  pid=$(awk '/^PPid:/ { print $2 }' /proc/$pid/status)
done
`;

/** The compiled binary (the user's copy), or `bun src/main.ts` from this checkout (readable by everyone). */
type From = "binary" | "source";
const command = (from: From) => (from === "binary" ? [bin] : [join(source, "node_modules", ".bin", "bun"), join(source, "src", "main.ts")]);

/** The environment the user's atomic runs with: the key, its own home and temp directory. */
function envArgs(extra: string[] = [], from: From = "binary"): string[] {
  return ["env", "-C", join(dir, "cwd"), `OPENAI_API_KEY=${KEY}`, `ATOMIC_HOME=${join(dir, "home")}`, `TMPDIR=${join(dir, "tmp")}`, "NO_COLOR=1", ...extra, ...command(from)];
}

function asUser(args: string[], extra: string[] = [], from: From = "binary") {
  return user.run([...envArgs(extra, from), ...args], { timeoutMs: 90_000 });
}

function spawnAsUser(args: string[]): Subprocess<"ignore", "pipe", "pipe"> {
  const proc = Bun.spawn(["runuser", "-u", user.name, "--", ...envArgs(), ...args], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", LANG: "C" },
  });
  spawned.add(proc);
  return proc;
}

function workflowFile(name: string, body: string): string {
  const file = join(dir, `${name}.ts`);
  writeFileSync(file, `import { workflow } from "atomic";\nexport default workflow(${body});\n`);
  chmodSync(file, 0o644);
  return file;
}

const lastJson = (stdout: string) => JSON.parse(stdout.trim().split("\n").at(-1)!);

/** The user's run of the workflow named `name`, as `atomic runs --json` shows it. */
async function runNamed(name: string): Promise<{ id: string; status: string }> {
  const r = await asUser(["runs", "--json"]);
  expect(r.code).toBe(0);
  return r.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .find((run) => run.workflowName === name);
}

/** What PEEK printed, checked: all three processes found, none of them readable. */
function expectNothingRead(seen: string): void {
  expect(seen).not.toContain(KEY);
  expect(seen).toMatch(/== worker \d+ .*--internal-workflow-worker/);
  expect(seen).toMatch(/== coordinator \d+ .*--internal-pool-coordinator/);
  expect(seen).toMatch(/== root \d+ .* run /);
  expect(seen.match(/environ: Permission denied/g)).toHaveLength(3);
  expect(seen.match(/mem \d+: denied/g)).toHaveLength(3);
  expect(seen).not.toContain("OPENAI_API_KEY=");
}

/** The pids of the user's processes running the binary (not their stages). */
function atomicProcessesOfUser(): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const status = readFileSync(`/proc/${name}/status`, "utf8");
      if (Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]) !== user.uid) continue;
      if (readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0")[0] === bin) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

for (const from of ["binary", "source"] as const) {
  test.skipIf(!supported)(`a shell stage and the openai bash tool of another user's run cannot read its worker's, coordinator's or root's environment or memory (${from})`, async () => {
    const server = await startFakeOpenAI(inOrder(toolCall("bash", { command: `. ${join(dir, "peek.sh")}` }), text("done")));
    try {
      const wf = workflowFile(
        `peek-${from}`,
        `{
          name: "peek",
          async run(ctx) {
            const shell = await ctx.shell("peek", ${JSON.stringify(`. ${join(dir, "peek.sh")}`)});
            // unsandboxed: the sandbox (the default of an agent stage) would hide peek.sh, and this is about the worker
            await ctx.task("agent", { prompt: "look around", model: "fake-model", sandbox: "off" });
            return { shell: shell.outputPath };
          },
        }`,
      );
      const r = await asUser(["run", wf, "--json", "--workers", "2"], [`ATOMIC_OPENAI_BASE_URL=${server.url}`], from);
      expect(r.stderr).not.toContain("non-dumpable");
      expect(r.code).toBe(0);
      // The stage's own stdout file: exactly what it read (a stage's text result would be redacted).
      expectNothingRead(readFileSync(lastJson(r.stdout).outputs.shell, "utf8"));
      // The worker still talks to the provider with the key; the bash tool's output went to the model as printed.
      expect(server.requests).toHaveLength(2);
      expect(server.requests[0]!.headers.get("authorization")).toBe(`Bearer ${KEY}`);
      expectNothingRead(server.requests[1]!.body.messages.find((m) => m.role === "tool")!.content!);
    } finally {
      await server.close();
    }
  }, 120_000);
}

test.skipIf(!supported)("as that user: a live run shows as running, the broker starts, and resume takes over at once after kill -9 of the root", async () => {
  const started = join(dir, "started");
  const wf = workflowFile(
    "hold",
    `{
      name: "hold",
      async run(ctx) {
        await ctx.shell("hold", ${JSON.stringify(`if [ -e ${started} ]; then exit 0; fi; touch ${started}; sleep 60`)});
        return { done: true };
      },
    }`,
  );
  const proc = spawnAsUser(["run", wf, "--workers", "1"]);
  await waitUntil(() => existsSync(started), 60_000, "the stage to start");
  // Running, not crashed: the holder's start time, read from /proc/<root>/stat of a non-dumpable process, matched.
  const run = await runNamed("hold");
  expect(run.status).toBe("running");
  // A message to the stage starts the intercom broker (its spawn lock checks the holder's pid).
  const sent = await asUser(["send", run.id, "hold", "hello"]);
  expect(sent.code).toBe(0);
  // Root, coordinator, worker and broker: each non-dumpable, so the kernel gives its private /proc entries to root.
  const ours = atomicProcessesOfUser();
  const roles = ours.map((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[1]).sort();
  expect(roles).toEqual(["--internal-intercom-broker", "--internal-pool-coordinator", "--internal-workflow-worker", "run"]);
  for (const pid of ours) expect(statSync(`/proc/${pid}/environ`).uid).toBe(0);

  const root = Number(Bun.spawnSync(["pgrep", "-P", String(proc.pid)]).stdout.toString().trim());
  expect(readFileSync(`/proc/${root}/cmdline`, "utf8")).toContain("run");
  process.kill(root, "SIGKILL");
  await proc.exited;
  // The lease (30 s) has not expired: only the dead-holder shortcut lets resume in at once.
  const resumed = await asUser(["resume", run.id, "--workers", "1"]);
  expect(resumed.stderr).not.toContain("being driven by another process");
  expect(resumed.code).toBe(0);
  expect((await runNamed("hold")).status).toBe("completed");
}, 120_000);

test("when prctl cannot be reached, every process of a run says so once in its log and goes on", async () => {
  const home = makeTempDir("atomic-nondump-home-");
  const wf = join(makeTempDir("atomic-nondump-wf-"), "wf.ts");
  writeFileSync(wf, `import { workflow } from "atomic";\nexport default workflow({ name: "soft", async run(ctx) { return { text: (await ctx.shell("a", "echo hi")).text }; } });\n`);
  const r = await runAtomic(["run", wf, "--json", "--workers", "1"], {
    home,
    env: { ATOMIC_FAULT_POINTS: "non-dumpable:*", ATOMIC_FAULT_ACTION: "throw" },
  });
  expect(r.code).toBe(0);
  expect(lastJson(r.stdout).outputs).toEqual({ text: "hi\n" });
  const warning = "warning: could not make this process non-dumpable (fault point non-dumpable fired)";
  expect(r.stderr.split(warning)).toHaveLength(2);
  const logs = join(home, "artifacts", lastJson(r.stdout).runId, "worker-logs");
  const files = readdirSync(logs);
  expect(files).toContain("coordinator.log");
  expect(files.length).toBeGreaterThanOrEqual(2);
  for (const f of files) expect(readFileSync(join(logs, f), "utf8").split(warning)).toHaveLength(2);
}, 60_000);

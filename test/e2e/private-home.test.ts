/**
 * A fresh home is private whatever command comes first: after `atomic run`
 * (or `runs`, or `doctor`, then `run`) as root with a fresh HOME, every
 * directory atomic made under the home is 0700 and every file 0600 (the
 * journal with its -wal/-shm while a run writes it, stage logs, worker
 * logs), and a second Unix user reads nothing there. The stage's own files
 * in its working directory keep the user's umask. A home left open by an
 * older version is tightened, with one warning line.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { createOtherUser, otherUsersSupported, removeOtherUsers, type OtherUser } from "../helpers/other-user.ts";
import { startFakeOpenAI, text } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "./support.ts";

const AGENT = join(import.meta.dir, "..", "runners", "fixtures", "agent.ts");

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await removeOtherUsers();
  await cleanupNow();
});

const WORKFLOW = `import { workflow, v } from "atomic";
export default workflow({
  name: "private",
  inputs: { secret: v.string(), gate: v.string() },
  async run(ctx) {
    const r = await ctx.shell("leak", \`echo \${ctx.inputs.secret}; echo \${ctx.inputs.secret} >&2; echo made > made-by-stage; while [ ! -e \${ctx.inputs.gate} ]; do sleep 0.05; done\`);
    return { text: r.text };
  },
});
`;

/** A parent every user may pass through, a fresh HOME in it (atomic makes ~/.atomic), a workflow and a working directory. */
function setup() {
  const parent = makeTempDir();
  chmodSync(parent, 0o755);
  const user = join(parent, "user");
  const work = join(parent, "work");
  mkdirSync(work, { mode: 0o755 });
  chmodSync(work, 0o755);
  const file = join(work, "wf.ts");
  writeFileSync(file, WORKFLOW);
  chmodSync(file, 0o644);
  // ATOMIC_HOME unset: the default home under HOME, as a new user has it
  const opts = { home: join(user, ".atomic"), cwd: work, env: { ATOMIC_HOME: undefined, HOME: user, TMPDIR: parent } };
  return { parent, user, home: join(user, ".atomic"), work, file, opts };
}

function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    out.push(path);
    if (lstatSync(path).isDirectory()) walk(path, out);
  }
  return out;
}

/** Every entry under `home` (and home itself): directories 0700, files 0600. */
function expectPrivate(home: string): string[] {
  const all = [home, ...walk(home)];
  const loose = all.filter((p) => {
    const st = lstatSync(p);
    return (st.mode & 0o777) !== (st.isDirectory() ? 0o700 : 0o600);
  });
  expect(loose.map((p) => `${p} ${(statSync(p).mode & 0o777).toString(8)}`)).toEqual([]);
  return all;
}

/** What the other user can list or read of `paths` (nothing, expected). */
async function readableBy(other: OtherUser, paths: string[]): Promise<string[]> {
  const script = 'for f; do if [ -d "$f" ]; then ls "$f" >/dev/null 2>&1 && echo "$f"; else cat "$f" >/dev/null 2>&1 && echo "$f"; fi; done';
  const r = await other.run(["sh", "-c", script, "sh", ...paths]);
  return r.stdout.split("\n").filter(Boolean);
}

async function runToEnd(s: ReturnType<typeof setup>, other: OtherUser | undefined): Promise<void> {
  const gate = join(s.parent, "gate");
  const proc = spawnAtomic(["run", s.file, "--input", "secret=hunter2-in-the-logs", "--input", `gate=${gate}`], s.opts);
  // while the stage runs: the journal's -wal and -shm exist too
  await waitUntil(() => existsSync(join(s.home, "atomic.db-wal")) && existsSync(join(s.work, "made-by-stage")), 30_000, "the stage to run");
  const live = expectPrivate(s.home);
  expect(live).toContain(join(s.home, "atomic.db-shm"));
  if (other) expect(await readableBy(other, live)).toEqual([]);
  writeFileSync(gate, "");
  const [code, stderr] = await Promise.all([proc.exited, new Response(proc.stderr).text()]);
  expect(stderr).not.toContain("warning");
  expect(code).toBe(0);
  const all = expectPrivate(s.home);
  expect(all.some((p) => p.endsWith("stdout.log"))).toBe(true);
  expect(all.some((p) => p.endsWith("coordinator.log"))).toBe(true);
  if (other) expect(await readableBy(other, all)).toEqual([]);
  // the stage's own file in its working directory: the user's umask, not atomic's
  expect(statSync(join(s.work, "made-by-stage")).mode & 0o777).toBe(0o666 & ~process.umask());
}

e2eTest("atomic run as the first command makes the home private; another user reads nothing of it", async () => {
  const s = setup();
  const other = otherUsersSupported() ? await createOtherUser() : undefined;
  await runToEnd(s, other);
});

for (const first of ["runs", "doctor"]) {
  e2eTest(`${first} as the first command, then run: the home is private`, async () => {
    const s = setup();
    const r = await runAtomic([first], s.opts);
    expect(r.stderr).not.toContain("warning");
    if (existsSync(s.home)) expectPrivate(s.home);
    await runToEnd(s, undefined);
  });
}

e2eTest("a home left readable by others is tightened with one warning line", async () => {
  const s = setup();
  expect((await runAtomic(["runs"], s.opts)).code).toBe(0);
  chmodSync(s.home, 0o755);
  chmodSync(join(s.home, "atomic.db"), 0o644);
  const r = await runAtomic(["runs"], s.opts);
  expect(r.code).toBe(0);
  const warnings = r.stderr.split("\n").filter((l) => l.startsWith("warning:"));
  expect(warnings.length).toBe(1);
  expect(warnings[0]).toContain(s.home);
  expectPrivate(s.home);
  // once tightened, nothing more to say
  expect((await runAtomic(["runs"], s.opts)).stderr).not.toContain("warning");
});

e2eTest("an agent stage's transcript, logs and session slots are private too", async () => {
  const server = await startFakeOpenAI(() => text("the answer"));
  try {
    const s = setup();
    const env = { ...s.opts.env, XDG_RUNTIME_DIR: undefined, ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const r = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { ...s.opts, env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const all = expectPrivate(s.home);
    expect(all.some((p) => p.endsWith("transcript.md") || p.endsWith("transcript.jsonl"))).toBe(true);
    expect(all).toContain(join(s.home, "run", "agent-slots", "slots.db"));
    if (otherUsersSupported()) expect(await readableBy(await createOtherUser(), all)).toEqual([]);
  } finally {
    await server.close();
  }
});

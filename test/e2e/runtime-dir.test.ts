/**
 * Host-wide state of a user (the agent session slots) lives in the user's
 * runtime directory or the home, never at a predictable path in a shared
 * temp directory: a second Unix user who pre-creates the old path
 * (`$TMPDIR/atomic-<user>/agent-slots`, filled with held slots) blocks no
 * agent stage and gets nothing written there; with USER unset, two users
 * keep their state apart; an XDG_RUNTIME_DIR that is not the user's own is
 * not used; a slots directory of another user is refused in one sentence;
 * the socket of a broker whose home is too deep goes to the runtime
 * directory, not /tmp.
 */

import { Database } from "bun:sqlite";
import { afterAll, afterEach, beforeAll, expect } from "bun:test";
import { chmodSync, chownSync, copyFileSync, existsSync, lstatSync, mkdirSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import { atomicBin, runAtomic, waitUntil } from "../helpers/atomic.ts";
import { createOtherUser, otherUsersSupported, removeOtherUsers } from "../helpers/other-user.ts";
import { startFakeOpenAI, text, type FakeOpenAI } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "./support.ts";

const AGENT = join(import.meta.dir, "..", "runners", "fixtures", "agent.ts");
let server: FakeOpenAI;

beforeAll(async () => {
  server = await startFakeOpenAI(() => text("hello"));
});
afterEach(cleanupWhenIdle);
afterAll(async () => {
  await removeOtherUsers();
  await cleanupNow();
  await server.close();
});

/** A directory like /tmp: every user may create entries in it (sticky). */
function sharedTmp(): string {
  const dir = makeTempDir("atomic-shared-tmp-");
  chmodSync(dir, 0o1777);
  return dir;
}

function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    out.push(path);
    if (lstatSync(path).isDirectory()) walk(path, out);
  }
  return out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The environment of a run with `tmp` as its temp directory and no XDG_RUNTIME_DIR. */
function envWith(tmp: string): Record<string, string | undefined> {
  return { TMPDIR: tmp, XDG_RUNTIME_DIR: undefined, ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
}

e2eTest("another user pre-creating the old /tmp slots path with every slot held blocks no agent stage and gets nothing", async () => {
  if (!otherUsersSupported()) return;
  const other = await createOtherUser();
  const tmp = sharedTmp();
  // what the other user plants: $TMPDIR/atomic-<our name>/agent-slots/slots.db, all slots held by pid 1 (alive forever)
  const planted = join(tmp, `atomic-${userInfo().username}`, "agent-slots");
  mkdirSync(planted, { recursive: true });
  const db = new Database(join(planted, "slots.db"), { create: true });
  db.run("create table slots (id integer primary key autoincrement, pid integer not null, start integer not null, at integer not null)");
  for (let i = 0; i < 64; i++) db.run("insert into slots (pid, start, at) values (1, 0, ?)", [Date.now()]);
  db.close();
  for (const p of [join(tmp, `atomic-${userInfo().username}`), ...walk(join(tmp, `atomic-${userInfo().username}`))]) {
    chownSync(p, other.uid, other.uid);
    chmodSync(p, lstatSync(p).isDirectory() ? 0o777 : 0o666);
  }
  const before = walk(tmp).map((p) => `${p} ${statSync(p).size}`).sort();

  const home = join(makeTempDir(), "home");
  const r = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { home, env: envWith(tmp), timeoutMs: 45_000 });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs.text).toBe("hello");
  // our slots: in the home's runtime directory, private
  expect(statSync(join(home, "run", "agent-slots")).mode & 0o777).toBe(0o700);
  expect(statSync(join(home, "run", "agent-slots", "slots.db")).mode & 0o777).toBe(0o600);
  // nothing of ours in the shared directory, and the planted file untouched
  expect(walk(tmp).map((p) => `${p} ${statSync(p).size}`).sort()).toEqual(before);
  expect((await other.run(["ls", join(home, "run")])).code).not.toBe(0);
});

e2eTest("with USER unset, two users keep their agent slots apart (nothing in the shared temp directory)", async () => {
  if (!otherUsersSupported()) return;
  const other = await createOtherUser();
  const tmp = sharedTmp();
  const rootHome = join(makeTempDir(), "home");
  const mine = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { home: rootHome, env: { ...envWith(tmp), USER: undefined, LOGNAME: undefined }, timeoutMs: 45_000 });
  expect(mine.code).toBe(0);

  const theirs = makeTempDir();
  // The binary and the workflow copied where that user can read them: the checkout may sit in a folder only we can enter.
  const bin = join(theirs, "atomic");
  copyFileSync(atomicBin(), bin);
  chmodSync(bin, 0o755);
  const workflowCopy = join(theirs, "agent.ts");
  copyFileSync(AGENT, workflowCopy);
  chmodSync(workflowCopy, 0o644);
  chownSync(theirs, other.uid, other.uid);
  const env = ["env", "-u", "USER", "-u", "LOGNAME", `HOME=${theirs}`, `ATOMIC_HOME=${join(theirs, "home")}`, `TMPDIR=${tmp}`, "NO_COLOR=1"];
  const cmd = [...env, `ATOMIC_OPENAI_BASE_URL=${server.url}`, "OPENAI_API_KEY=sk-test", "sh", "-c", `cd "$HOME" && exec "$@"`, "sh", bin, "run", workflowCopy, "--json", "--workers", "1"];
  const r = await other.run(cmd, { timeoutMs: 45_000 });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);

  expect(walk(tmp)).toEqual([]);
  const rootSlots = join(rootHome, "run", "agent-slots", "slots.db");
  const theirSlots = join(theirs, "home", "run", "agent-slots", "slots.db");
  expect(statSync(rootSlots).uid).toBe(0);
  expect(statSync(theirSlots).uid).toBe(other.uid);
});

e2eTest("XDG_RUNTIME_DIR: used when it is ours and 0700; ignored when it is not", async () => {
  const home = join(makeTempDir(), "home");
  const xdg = makeTempDir("atomic-xdg-");
  chmodSync(xdg, 0o700);
  const ok = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { home, env: { ...envWith(sharedTmp()), XDG_RUNTIME_DIR: xdg } });
  expect(ok.code).toBe(0);
  expect(existsSync(join(xdg, "atomic", "agent-slots", "slots.db"))).toBe(true);
  expect(existsSync(join(home, "run"))).toBe(false);

  // a runtime directory others can write is not ours to use
  const open = makeTempDir("atomic-xdg-");
  chmodSync(open, 0o777);
  const home2 = join(makeTempDir(), "home");
  const r = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { home: home2, env: { ...envWith(sharedTmp()), XDG_RUNTIME_DIR: open } });
  expect(r.code).toBe(0);
  expect(readdirSync(open)).toEqual([]);
  expect(existsSync(join(home2, "run", "agent-slots", "slots.db"))).toBe(true);
});

e2eTest("a configured slots directory of another user is refused in one sentence", async () => {
  if (!otherUsersSupported()) return;
  const other = await createOtherUser();
  const home = join(makeTempDir(), "home");
  const slots = join(makeTempDir(), "slots");
  mkdirSync(slots, { mode: 0o700 });
  chownSync(slots, other.uid, other.uid);
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "config.json"), JSON.stringify({ admission: { slotsDir: slots } }));
  const r = await runAtomic(["run", AGENT, "--workers", "1"], { home, env: envWith(sharedTmp()) });
  expect(r.code).not.toBe(0);
  expect(r.stderr).toContain(`refusing the agent session slots directory ${slots}: it belongs to another user`);
  expect(r.stderr).not.toMatch(/\n\s+at /);
  expect(readdirSync(slots)).toEqual([]);
});

e2eTest("a home too deep for a socket path: the broker's socket goes to the runtime directory, else a clear refusal", async () => {
  const base = makeTempDir();
  const home = join(base, "d".repeat(60), "e".repeat(40));
  const xdg = makeTempDir("atomic-xdg-");
  chmodSync(xdg, 0o700);
  const tmp = sharedTmp();
  const r = await runAtomic(["sessions"], { home, env: { TMPDIR: tmp, XDG_RUNTIME_DIR: xdg } });
  const pidFile = join(home, "intercom", "broker.pid");
  try {
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const sockets = readdirSync(join(xdg, "atomic", "intercom"));
    expect(sockets.length).toBe(1);
    expect(sockets[0]).toMatch(/^[0-9a-f]{24}\.sock$/);
    expect(statSync(join(xdg, "atomic", "intercom")).mode & 0o777).toBe(0o700);
    expect(walk(tmp)).toEqual([]);
  } finally {
    if (existsSync(pidFile)) {
      const { pid } = JSON.parse(readFileSync(pidFile, "utf8")) as { pid: number };
      process.kill(pid, "SIGTERM");
      await waitUntil(() => !alive(pid), 10_000, "the broker to exit");
    }
  }
  // no runtime directory of ours: the home's is deeper still; refused in one sentence, nothing in /tmp
  const refused = await runAtomic(["sessions"], { home: `${home}2`, env: { TMPDIR: tmp, XDG_RUNTIME_DIR: undefined } });
  expect(refused.code).not.toBe(0);
  expect(refused.stderr).toMatch(/^error: the broker's socket path .* is longer than a unix socket allows\.\nhint: set XDG_RUNTIME_DIR/);
  expect(walk(tmp)).toEqual([]);
});

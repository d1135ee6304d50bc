/**
 * A second Unix user on this machine, for tests about what other local users
 * can reach. Created with `useradd` under a unique name (its home in /tmp),
 * commands run as it with `runuser`, deleted with `userdel -r`. Every user
 * made here is tracked: call `removeOtherUsers()` in afterAll (and
 * afterEach) so none outlives the test, also when it fails.
 * Needs root; `otherUsersSupported()` says whether the machine allows it.
 */

import { randomBytes } from "node:crypto";

export interface OtherUser {
  name: string;
  uid: number;
  /** Runs `cmd` as this user (no shell), with a minimal environment. */
  run(cmd: string[], opts?: { timeoutMs?: number }): Promise<{ code: number; stdout: string; stderr: string }>;
}

const created = new Set<string>();

export function otherUsersSupported(): boolean {
  return process.getuid?.() === 0 && Bun.which("useradd") !== null && Bun.which("runuser") !== null && Bun.which("userdel") !== null;
}

async function exec(cmd: string[], timeoutMs = 30_000): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe", stdin: "ignore", env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", LANG: "C" } });
  const timer = setTimeout(() => proc.kill("SIGKILL"), timeoutMs);
  try {
    const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    return { code, stdout, stderr };
  } finally {
    clearTimeout(timer);
  }
}

export async function createOtherUser(): Promise<OtherUser> {
  const name = `atx${randomBytes(5).toString("hex")}`;
  const home = `/tmp/${name}-home`;
  const made = await exec(["useradd", "--create-home", "--home-dir", home, "--shell", "/bin/sh", "--user-group", name]);
  if (made.code !== 0) throw new Error(`useradd ${name} failed (${made.code}): ${made.stderr.trim()}`);
  created.add(name);
  const uid = Number((await exec(["id", "-u", name])).stdout.trim());
  return {
    name,
    uid,
    run: (cmd, opts = {}) => exec(["runuser", "-u", name, "--", ...cmd], opts.timeoutMs),
  };
}

/** Deletes every user made by createOtherUser, with their homes (their commands were waited for, or killed on timeout). */
export async function removeOtherUsers(): Promise<void> {
  for (const name of [...created]) {
    const r = await exec(["userdel", "-r", "-f", name]);
    if (r.code !== 0 && r.code !== 6 /* no such user */) process.stderr.write(`userdel ${name} failed (${r.code}): ${r.stderr}\n`);
    created.delete(name);
  }
}

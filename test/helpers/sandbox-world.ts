/**
 * The world a sandbox test probes (test/e2e/sandbox.test.ts,
 * test/runners/sandbox-pi.test.ts): a fake user home with a planted SSH key
 * and a .gitconfig, an atomic home with a planted secret, a cwd with a
 * symlink out of it, a loopback server that is not the provider (counting
 * its visitors), and `probe`: shell code that tries each escape and prints
 * one KEY=outcome line per try. `close()` ends the server and whatever the
 * probe left behind.
 */

import { existsSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pidsRunning } from "./processes.ts";
import { makeTempDir } from "./temp.ts";

/** A fake user home with a planted key, an atomic home with a planted secret, a cwd with a symlink out, and a loopback server that counts its visitors. */
export function sandboxWorld() {
  const root = makeTempDir("atomic-sbx-");
  const user = join(root, "user");
  mkdirSync(join(user, ".ssh"), { recursive: true });
  writeFileSync(join(user, ".ssh", "id_ed25519"), "-----BEGIN OPENSSH PRIVATE KEY-----\nfake\n-----END OPENSSH PRIVATE KEY-----\n");
  writeFileSync(join(user, ".gitconfig"), "[user]\n\tname = Sandboxed\n");
  const home = join(root, "atomic");
  mkdirSync(home, { mode: 0o700 });
  writeFileSync(join(home, "planted-secret"), "atomic-home-secret\n");
  const cwd = join(root, "work");
  const outside = join(root, "outside");
  mkdirSync(cwd);
  mkdirSync(outside);
  symlinkSync(outside, join(cwd, "link-out"));
  let visits = 0;
  const other = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => (visits++, new Response("reached")) });
  const marker = String(7_000_000 + Math.floor(Math.random() * 1_000_000));
  const systemFile = `/var/tmp/atomic-sandbox-escape-${marker}`;
  const probe = [
    `cat "$HOME/.ssh/id_ed25519" >/dev/null 2>&1 && echo SSH=read || echo SSH=denied`,
    `cat "${home}/planted-secret" >/dev/null 2>&1 && echo ATOMIC_HOME=read || echo ATOMIC_HOME=denied`,
    `cat "$HOME/.gitconfig" >/dev/null 2>&1 && echo GITCONFIG=read || echo GITCONFIG=hidden`,
    `echo x > ${systemFile} 2>/dev/null && echo SYSTEM=written || echo SYSTEM=denied`,
    `echo x > "${outside}/direct" 2>/dev/null; echo x > link-out/via-link 2>/dev/null`,
    `curl -s -m 5 -o /dev/null http://127.0.0.1:${other.port}/ && echo OTHER_PORT=reached || echo OTHER_PORT=denied`,
    `setsid sleep ${marker} >/dev/null 2>&1 < /dev/null &`,
    `echo done > result.txt && echo WORK=done`,
  ].join("\n");
  return {
    user,
    home,
    cwd,
    env: { HOME: user },
    probe,
    otherPort: other.port,
    visits: () => visits,
    resetVisits: () => void (visits = 0),
    leftovers: () => pidsRunning(["sleep", marker]),
    escaped: () => [join(outside, "direct"), join(outside, "via-link"), systemFile].filter((f) => existsSync(f)),
    close() {
      other.stop(true);
      for (const pid of pidsRunning(["sleep", marker])) process.kill(pid, "SIGKILL");
      rmSync(systemFile, { force: true });
    },
  };
}


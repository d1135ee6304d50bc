/**
 * A sandboxed stage on a worker host (`atomic worker`, a shared Postgres
 * journal): the host's own atomic home is hidden as well as the root's
 * (the root names only its own home; the host adds its own when it takes
 * the stage: src/fleet/host.ts), and the stage's work in the host's
 * workdir succeeds.
 * The host runs on a machine of a test fleet: a network namespace of its
 * own where this machine allows it (test/helpers/fleet.ts), reaching the
 * fleet's Postgres over its own link. With no iptables or nft here, such a
 * host still reaches every port of the bridge address, not only Postgres:
 * the namespace keeps it off the root's loopback, not off the bridge.
 */

import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { makeFleet, type Fleet } from "../helpers/fleet.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { fixture } from "../e2e/support.ts";
import { cleanUpHosts, fleetJournal, startHost } from "./support.ts";

let fleet: Fleet;
beforeAll(async () => {
  fleet = await makeFleet({ hosts: 1 });
}, 60_000);
afterAll(async () => {
  await fleet?.destroy();
}, 60_000);
const outside: string[] = [];
afterEach(async () => {
  await cleanUpHosts();
  for (const d of outside.splice(0)) rmSync(d, { recursive: true, force: true });
});

test("a sandboxed stage on a worker host sees neither the host's atomic home nor the root's", async () => {
  const { url, machine } = await fleetJournal(fleet);
  // Outside /tmp (a sandbox's /tmp is its own, which would hide them anyway): /var/tmp, visible read-only inside.
  const dir = mkdtempSync("/var/tmp/atomic-fleet-sbx-");
  outside.push(dir);
  const host = await startHost({ ...machine(0), id: "boxed", slots: 1, home: join(dir, "host") });
  // Another machine: a network namespace of its own (where the fleet could make one).
  if (fleet.mode === "netns") expect(readlinkSync(`/proc/${host.proc.pid}/ns/net`)).not.toBe(readlinkSync("/proc/self/ns/net"));
  writeFileSync(join(host.home, "planted-secret"), "host secret\n");
  const root = join(dir, "root");
  const probe = [
    `cat ${join(host.home, "planted-secret")} >/dev/null 2>&1 && echo HOST_HOME=read || echo HOST_HOME=denied`,
    `ls ${root} >/dev/null 2>&1 && [ -n "$(ls -A ${root})" ] && echo ROOT_HOME=read || echo ROOT_HOME=denied`,
    `echo done > result.txt && echo WORK=done`,
  ].join("\n");
  const r = await runAtomic(["run", fixture("sandboxed.ts"), "--journal", url, "--workers", "0", "--json", "--input", `shell=${probe}`, "--input", "sandbox=true"], { home: root });
  expect(r.code).toBe(0);
  const outputs = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
  for (const seen of ["HOST_HOME=denied", "ROOT_HOME=denied", "WORK=done"]) expect(outputs.text).toContain(seen);
  expect(readFileSync(join(host.workdir, "result.txt"), "utf8")).toBe("done\n");
}, 90_000);

test("a stage in a worktree on a host that does not have the root's worktree fails in one sentence naming the host and what to do", async () => {
  const { url, machine } = await fleetJournal(fleet);
  const repo = makeTempDir("atomic-fleet-wt-");
  const git = (...args: string[]) => execFileSync("git", args, { cwd: repo, stdio: ["ignore", "pipe", "pipe"] }).toString();
  git("init", "-q", "-b", "main");
  writeFileSync(join(repo, "shared.txt"), "base\n");
  git("add", "-A");
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base");
  const out = join(makeTempDir(), "out.json");
  const home = makeTempDir();
  const root = spawnAtomic(["run", fixture("worktrees.ts"), "--journal", url, "--workers", "0", "--input", `out=${out}`, "--input", "mode=bad"], { home, cwd: repo });
  // The root made the worktree (and listed it for gc: it is whole) and queued the stage; no host has claimed it yet.
  // Another machine would not have it.
  const made = await waitUntil(() => {
    const runs = existsSync(join(home, "artifacts")) ? readdirSync(join(home, "artifacts")) : [];
    const list = runs.map((r) => join(home, "artifacts", r, "worktrees.jsonl")).find((f) => existsSync(f) && readFileSync(f, "utf8").endsWith("\n"));
    return list ? (JSON.parse(readFileSync(list, "utf8").split("\n")[0]!) as { path: string }).path : undefined;
  }, 30_000, "the root to make the worktree") as string;
  rmSync(made, { recursive: true, force: true });
  await startHost({ ...machine(0), id: "elsewhere", slots: 1 });
  expect(await root.exited).toBe(1);
  const stderr = await new Response(root.stderr).text();
  expect(stderr).toContain(`stage "bad": its worktree ${made} was made where the run's root runs, and host elsewhere does not have it (the run's repository has no remote a host could share;`);
  expect(stderr).not.toContain("    at ");
  expect(existsSync(out)).toBe(false);
}, 90_000);

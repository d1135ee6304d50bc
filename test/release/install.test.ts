/**
 * The release and its installer, as a user meets them: scripts/release.sh
 * builds a release (here for this machine only: the other targets download
 * Bun runtimes, which the note of the release work measured by hand) with
 * SHA256SUMS and an install.sh that knows the release's address (a file://
 * URL here); `sh install.sh` picks this machine's binary, checks it and
 * installs it; the installed binary names the commit and build date. A
 * binary that does not match SHA256SUMS, a platform the release lacks and
 * an unknown option each end in one sentence and a hint, and install
 * nothing (no file, no leftover download).
 */

import { beforeAll, expect, test } from "bun:test";
import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";

const release = makeTempDir("atomic-release-");
const PLATFORM = `linux-${process.arch === "arm64" ? "arm64" : "x64"}`;

async function sh(argv: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = Bun.spawn(argv, { cwd: ROOT, env: { PATH: "/usr/bin:/bin", HOME: env.HOME ?? makeTempDir(), ...env }, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, stdout, stderr };
}

beforeAll(async () => {
  const r = await sh(["bash", "scripts/release.sh", "--out", release, "--targets", PLATFORM], { PATH: process.env.PATH! });
  if (r.code !== 0) throw new Error(`release.sh exited ${r.code}: ${r.stderr}`);
}, 300_000);

test("release.sh writes the binary, install.sh with the release's address, and SHA256SUMS that verify", async () => {
  expect(readdirSync(release).sort()).toEqual(["SHA256SUMS", `atomic-${PLATFORM}`, "install.sh"]);
  expect(readFileSync(join(release, "install.sh"), "utf8")).toContain(`release_url="file://${release}"`);
  const check = Bun.spawnSync(["sha256sum", "-c", "SHA256SUMS"], { cwd: release, stdout: "pipe", stderr: "pipe" });
  expect(check.stdout.toString()).toBe(`atomic-${PLATFORM}: OK\ninstall.sh: OK\n`);
});

test("install.sh installs this machine's binary into ~/.local/bin; it names its commit, build date and target", async () => {
  const home = makeTempDir();
  const r = await sh(["sh", join(release, "install.sh")], { HOME: home });
  expect(r.stderr).toBe("");
  const bin = join(home, ".local", "bin");
  expect(r.stdout).toBe(`installed atomic (${PLATFORM}) as ${bin}/atomic\nnote: ${bin} is not on PATH; add it, e.g. export PATH="${bin}:$PATH"\n`);
  expect(readdirSync(bin)).toEqual(["atomic"]);
  const v = Bun.spawnSync([join(bin, "atomic"), "version", "--json"], { env: { HOME: home, ATOMIC_HOME: join(home, ".atomic") }, stdout: "pipe" });
  const info = JSON.parse(v.stdout.toString());
  const head = Bun.spawnSync(["git", "rev-parse", "HEAD"], { cwd: ROOT, stdout: "pipe" }).stdout.toString().trim();
  expect(info.commit).toStartWith(head);
  expect(info.target).toBe(`bun-${PLATFORM}`);
  expect(Date.parse(info.buildDate)).toBeGreaterThan(Date.parse("2026-01-01"));
  // installing again replaces it; on PATH: no note
  const again = await sh(["sh", join(release, "install.sh"), "--to", bin], { HOME: home, PATH: `${bin}:/usr/bin:/bin` });
  expect(again.stdout).toBe(`installed atomic (${PLATFORM}) as ${bin}/atomic\n`);
});

test("a binary that does not match SHA256SUMS is refused and nothing is installed", async () => {
  const bad = makeTempDir("atomic-release-bad-");
  cpSync(release, bad, { recursive: true });
  const file = join(bad, `atomic-${PLATFORM}`);
  const bytes = readFileSync(file);
  bytes[bytes.length - 1] = bytes[bytes.length - 1]! ^ 0xff;
  writeFileSync(file, bytes);
  const to = join(makeTempDir(), "bin");
  const r = await sh(["sh", join(release, "install.sh"), "--from", `file://${bad}`, "--to", to]);
  expect(r.code).toBe(1);
  expect(r.stdout).toBe("");
  expect(r.stderr).toMatch(new RegExp(`^error: atomic-${PLATFORM} does not match the release's SHA256SUMS \\(got [0-9a-f]{64}, expected [0-9a-f]{64}\\); nothing was installed\\.\\nhint: download again; if it persists, the release or the connection is not to be trusted\\n$`));
  expect(readdirSync(to)).toEqual([]);
});

test("a platform the release lacks, a missing release and an unknown option: one sentence and a hint", async () => {
  const to = join(makeTempDir(), "bin");
  const lacking = await sh(["sh", join(release, "install.sh"), "--platform", "darwin-arm64", "--to", to]);
  expect(lacking).toEqual({ code: 1, stdout: "", stderr: `error: the release has no build for darwin-arm64.\nhint: its SHA256SUMS lists: atomic-${PLATFORM} \n` });
  const missing = await sh(["sh", join(release, "install.sh"), "--from", `file://${release}/nowhere`, "--to", to]);
  expect(missing.code).toBe(1);
  expect(missing.stderr).toEndWith(`error: could not download file://${release}/nowhere/SHA256SUMS.\nhint: check the release address\n`);
  const unknown = await sh(["sh", join(ROOT, "scripts", "install.sh"), "--frm", "x"]);
  expect(unknown).toEqual({ code: 1, stdout: "", stderr: "error: unknown option --frm.\nhint: sh install.sh [--from RELEASE-URL] [--to DIR] [--platform linux-arm64]\n" });
  const none = await sh(["sh", join(ROOT, "scripts", "install.sh")]);
  expect(none).toEqual({ code: 1, stdout: "", stderr: "error: no release to install from.\nhint: give its address: sh install.sh --from RELEASE-URL\n" });
  expect(existsSync(to) ? readdirSync(to) : []).toEqual([]);
});

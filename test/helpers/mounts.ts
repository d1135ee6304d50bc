/**
 * Real storage faults for tests (root only): a small tmpfs that fills, an
 * ext4 file system on a loop device that turns read-only mid-run, and a
 * read-only bind mount of a directory.
 *
 * `mount -o remount,ro` of a tmpfs fails while files are open for writing,
 * so "read-only mid-run" is ext4 mounted with errors=remount-ro and an
 * error injected through /sys/fs/ext4/<dev>/trigger_fs_error: the kernel
 * then refuses every write, as on a failing disk. Every mount, loop device
 * and image made here is undone by `cleanup()` (call it in finally) or,
 * as a safety net, by `unmountAll()` in afterAll.
 *
 * Repairing that file system means the kernel must let go of it: a
 * process that made a mount namespace while it was mounted (a bwrap
 * sandbox, `ip netns exec`, `unshare -m`, by any test or program on the
 * machine; `/` is private here, so our unmount does not reach them)
 * keeps a copy, and with it the broken superblock. A mount of the device
 * then takes that superblock again, writable in name, and every write
 * fails with EROFS (the kernel marks it read-only by a flag of its own,
 * not as a read-only mount). So the file system is mounted below a shared
 * mount of its own directory, whose unmounts reach the copies made from
 * it (bwrap and `ip netns exec` make theirs slaves); `repair()` detaches
 * the copies that a private namespace keeps (`unshare -m`), waits for
 * the kernel to drop the file system (its /sys/fs/ext4/<dev> entry goes),
 * and checks that e2fsck repaired it and the new mount takes a write.
 */

import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";

export const CAN_MOUNT = process.getuid?.() === 0 && Bun.which("mount") !== null;
export const CAN_LOOP = CAN_MOUNT && Bun.which("losetup") !== null && Bun.which("mkfs.ext4") !== null;

function sh(cmd: string[]): string {
  const r = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${cmd.join(" ")} failed (${r.exitCode}): ${r.stderr.toString().trim()}`);
  return r.stdout.toString().trim();
}

function quiet(cmd: string[]): void {
  Bun.spawnSync(cmd, { stdout: "ignore", stderr: "ignore" });
}

export interface TestMount {
  /** The mount point (empty at first). */
  dir: string;
  cleanup(): void;
}

const live = new Set<TestMount>();

/** A mount at `dir`, unmounted and removed by its cleanup (or by the file's cleanup of every live one). */
function tracked(dir: string): TestMount {
  const m: TestMount = {
    dir,
    cleanup() {
      live.delete(m);
      quiet(["umount", "-l", dir]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  live.add(m);
  return m;
}

/** A tmpfs of `mib` MiB. */
export function mountTmpfs(mib: number): TestMount {
  const dir = mkdtempSync(join(tmpdir(), "atomic-tmpfs-"));
  sh(["mount", "-t", "tmpfs", "-o", `size=${mib}m,mode=0700`, "tmpfs", dir]);
  const m = tracked(dir);
  return m;
}

export interface LoopMount extends TestMount {
  /** Injects a file-system error: the kernel remounts it read-only at once. */
  breakIt(): void;
  /** Unmounts, repairs (e2fsck) and mounts it again writable, as an administrator would. */
  repair(): Promise<void>;
}

/** An ext4 file system of `mib` MiB on a loop device, mounted with errors=remount-ro. */
export function mountLoopExt4(mib = 32): LoopMount {
  const work = mkdtempSync(join(tmpdir(), "atomic-loop-"));
  const image = join(work, "fs.img");
  const dir = join(work, "mnt");
  writeFileSync(image, "");
  sh(["truncate", "-s", `${mib}M`, image]);
  sh(["mkfs.ext4", "-q", "-F", image]);
  const dev = sh(["losetup", "-f", "--show", image]);
  sh(["mkdir", "-p", dir]);
  const mount = () => sh(["mount", "-o", "errors=remount-ro", dev, dir]);
  try {
    sh(["mount", "--bind", work, work]);
    sh(["mount", "--make-shared", work]);
    mount();
  } catch (err) {
    quiet(["umount", "-l", work]);
    quiet(["losetup", "-d", dev]);
    rmSync(work, { recursive: true, force: true });
    throw err;
  }
  const m: LoopMount = {
    dir,
    breakIt() {
      writeFileSync(`/sys/fs/ext4/${basename(dev)}/trigger_fs_error`, "1");
    },
    async repair() {
      sh(["umount", dir]);
      await release(dev);
      // 0: clean, 1: errors corrected; anything else (4: left uncorrected, 8: the device is in use) is no repair.
      const fsck = Bun.spawnSync(["e2fsck", "-fy", dev], { stdout: "pipe", stderr: "pipe" });
      if (fsck.exitCode !== 0 && fsck.exitCode !== 1) throw new Error(`e2fsck -fy ${dev} exited ${fsck.exitCode}: ${fsck.stdout.toString().trim()} ${fsck.stderr.toString().trim()}`);
      mount();
      const probe = join(dir, ".repaired");
      writeFileSync(probe, "");
      rmSync(probe);
    },
    cleanup() {
      live.delete(m);
      quiet(["umount", "-l", dir]);
      quiet(["umount", "-l", work]);
      quiet(["losetup", "-d", dev]);
      rmSync(work, { recursive: true, force: true });
    },
  };
  live.add(m);
  return m;
}

/**
 * A copy in a sandbox's namespace cannot be detached from outside (its
 * mounts are locked to its user namespace); it goes when the sandbox ends,
 * a stage's run at most.
 */
const RELEASE_LIMIT_MS = 60_000;

/**
 * Detaches the copies of `dev`'s file system that private mount namespaces
 * hold (see the header) and waits until the kernel has dropped it; throws
 * naming what still holds it after RELEASE_LIMIT_MS.
 */
async function release(dev: string): Promise<void> {
  const name = basename(dev);
  const sysEntry = `/sys/fs/ext4/${name}`;
  const devNumber = readFileSync(`/sys/block/${name}/dev`, "utf8").trim();
  const deadline = Date.now() + RELEASE_LIMIT_MS;
  while (existsSync(sysEntry)) {
    const holders = mountCopies(devNumber);
    if (Date.now() > deadline) {
      throw new Error(`the kernel still holds ${dev}'s file system after its unmount (copies: ${holders.map((h) => `pid ${h.pid} at ${h.at}`).join(", ") || "none found"})`);
    }
    // -r: the path is the one the process sees from its own root.
    for (const h of holders) quiet(["nsenter", "-t", String(h.pid), "-m", "-r", "umount", "-l", h.at]);
    if (existsSync(sysEntry)) await Bun.sleep(100);
  }
}

/** One process per mount namespace whose mounts include the file system `devNumber` ("7:0"), with where it sees it. */
function mountCopies(devNumber: string): { pid: number; at: string }[] {
  const seen = new Set<string>();
  const copies: { pid: number; at: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const ns = readlinkSync(`/proc/${entry}/ns/mnt`);
      if (seen.has(ns)) continue;
      seen.add(ns);
      for (const line of readFileSync(`/proc/${entry}/mountinfo`, "utf8").split("\n")) {
        const fields = line.split(" ");
        if (fields[2] === devNumber) copies.push({ pid: Number(entry), at: fields[4]!.replace(/\\040/g, " ") });
      }
    } catch {
      // the process is gone
    }
  }
  return copies;
}

/** `src` seen read-only at a new mount point (a read-only bind mount): root cannot write there either. */
export function bindReadOnly(src: string): TestMount {
  const dir = mkdtempSync(join(tmpdir(), "atomic-ro-"));
  sh(["mount", "--bind", src, dir]);
  const m = tracked(dir);
  try {
    sh(["mount", "-o", "remount,bind,ro", dir]);
  } catch (err) {
    m.cleanup();
    throw err;
  }
  return m;
}

/** afterAll: whatever a failed test left mounted. */
export function unmountAll(): void {
  for (const m of [...live]) m.cleanup();
}

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
 */

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
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
  repair(): void;
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
    mount();
  } catch (err) {
    quiet(["losetup", "-d", dev]);
    rmSync(work, { recursive: true, force: true });
    throw err;
  }
  const m: LoopMount = {
    dir,
    breakIt() {
      writeFileSync(`/sys/fs/ext4/${basename(dev)}/trigger_fs_error`, "1");
    },
    repair() {
      sh(["umount", dir]);
      quiet(["e2fsck", "-fy", dev]);
      mount();
    },
    cleanup() {
      live.delete(m);
      quiet(["umount", "-l", dir]);
      quiet(["losetup", "-d", dev]);
      rmSync(work, { recursive: true, force: true });
    },
  };
  live.add(m);
  return m;
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

/**
 * shared/file-system-fault.ts on real kernel errors: a full device
 * (/dev/full: ENOSPC) and a read-only mount (EROFS, root only) become the
 * one storage sentence naming the file, with its hint; other errors and
 * atomic's own pass through. The command line's use of it, end to end:
 * test/e2e/storage-faults.test.ts (a resume on a home the kernel turned
 * read-only).
 */

import { afterAll, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileSystemFault, FILE_SYSTEM_FAULT_HINT } from "../../src/shared/file-system-fault.ts";
import { UsageError } from "../../src/shared/errors.ts";
import { bindReadOnly, CAN_MOUNT, unmountAll } from "../helpers/mounts.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterAll(() => {
  unmountAll();
  removeTempDirs();
});

function thrownBy(fn: () => void): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error("expected a throw");
}

test("a full disk is the storage sentence, with the hint (a failed write names no file)", () => {
  const fault = fileSystemFault(thrownBy(() => writeFileSync("/dev/full", "x")));
  expect(fault?.code).toBe("storage_unavailable");
  expect(fault?.message).toBe("atomic could not write to the file system: the disk is full (ENOSPC)");
  expect(fault?.hint).toBe(FILE_SYSTEM_FAULT_HINT);
});

test.if(CAN_MOUNT)("a read-only file system is the storage sentence naming the file", () => {
  const m = bindReadOnly(makeTempDir());
  const fault = fileSystemFault(thrownBy(() => mkdirSync(join(m.dir, "code"))));
  expect(fault?.message).toBe(`atomic could not write ${join(m.dir, "code")}: the file system is read-only (EROFS)`);
  m.cleanup();
});

test("other errors and atomic's own pass through", () => {
  expect(fileSystemFault(thrownBy(() => mkdirSync(join(makeTempDir(), "a", "b"))))).toBeUndefined(); // ENOENT
  expect(fileSystemFault(new UsageError("bad", "bad input"))).toBeUndefined();
  expect(fileSystemFault("EROFS")).toBeUndefined();
});

/**
 * The C library, for the few system calls Bun has no API for (prctl in
 * non-dumpable.ts, pipe2 in runners/shell/stdin-pipe.ts), through bun:ffi.
 *
 * glibc first, then musl's names (Alpine's bun is linked against musl).
 * Each caller opens the symbols it needs once per process (a dlopen
 * compiles a small trampoline per symbol: a few tenths of a millisecond)
 * and keeps them; Linux only: elsewhere, and when no libc loads, `openLibc`
 * says why not and the caller does without.
 */

import { dlopen, type FFIFunction, type Library } from "bun:ffi";

const LIBC_NAMES = ["libc.so.6", `libc.musl-${process.arch === "arm64" ? "aarch64" : "x86_64"}.so.1`, "libc.so"];

/** The first libc that loads with `symbols`, or why none did. */
export function openLibc<Fns extends Record<string, FFIFunction>>(symbols: Fns): { lib: Library<Fns> } | { failure: string } {
  if (process.platform !== "linux") return { failure: "not Linux" };
  let failure = "no libc could be loaded";
  for (const name of LIBC_NAMES) {
    try {
      return { lib: dlopen(name, symbols) };
    } catch (err) {
      failure = `${name}: ${(err as Error).message}`;
    }
  }
  return { failure };
}

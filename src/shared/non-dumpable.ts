/**
 * Keeping processes of the same user out of atomic's own (README
 * "Security" → "Credentials").
 *
 * A stage runs as the user atomic runs as, and Linux lets any process of
 * that user read another one's /proc/<pid>/environ (the environment as it
 * was at exec: provider keys, ATOMIC_JOURNAL, the coordinator's
 * configuration, even after process.env dropped them) and /proc/<pid>/mem,
 * or ptrace it. A stage finds its worker at $PPID. prctl(PR_SET_DUMPABLE,
 * 0) withdraws that: the kernel gives the process's private /proc/<pid>/
 * files to root and refuses every ptrace-mode access (environ, mem, maps,
 * fd/, ptrace itself) to callers without CAP_SYS_PTRACE. Entries readable
 * by everyone stay readable (stat, cmdline, status), so the start-time
 * checks of process-info.ts still see atomic's processes. The process
 * itself can no longer open its owner-only files either (its own environ,
 * io); atomic reads none of them.
 *
 * Done once, first thing, in every process of the binary (main.ts), before
 * it loads its role: root and CLI commands (which hold the status token
 * with --serve), pool coordinator, workers, intercom broker. exec resets
 * the flag (for a readable, non-setuid program), so what atomic starts is
 * dumpable again: a role re-executes the binary and sets it itself, and a
 * stage stays dumpable (pool/reap.ts finds leftover stage processes by
 * their environment).
 *
 * Linux only (elsewhere nothing is done). prctl is reached through bun:ffi
 * in the C library (glibc first, then musl's names: Alpine's bun is linked
 * against musl): the module, one dlopen of one symbol and the call cost about 0.3-0.4 ms
 * of CPU (the binary's `--version` with and without it, median of 150 runs
 * each), once per process, never per stage. It fails soft: when no libc
 * loads or prctl refuses, `makeNonDumpable` returns one sentence for the
 * process's log and the process goes on as before.
 */

import { dlopen, FFIType, type FFIFunction, type Library } from "bun:ffi";
import { faultPoint } from "./fault-points.ts";

const PR_SET_DUMPABLE = 4;
const LIBC_NAMES = ["libc.so.6", `libc.musl-${process.arch === "arm64" ? "aarch64" : "x86_64"}.so.1`, "libc.so"];

/** Makes this process non-dumpable; undefined when done (or not Linux), else why not. */
export function makeNonDumpable(): string | undefined {
  if (process.platform !== "linux") return undefined;
  let failure: string;
  try {
    faultPoint("non-dumpable");
    const libc = openLibc({ prctl: { args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64], returns: FFIType.i32 } });
    if ("failure" in libc) failure = libc.failure;
    else {
      try {
        if (libc.lib.symbols.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) === 0) return undefined;
        failure = "prctl(PR_SET_DUMPABLE) refused";
      } finally {
        libc.lib.close();
      }
    }
  } catch (err) {
    failure = (err as Error).message;
  }
  return (
    `could not make this process non-dumpable (${failure}); ` +
    `processes of the same user, stages included, can read its environment through /proc.`
  );
}

/** The first libc that loads with `symbols`, or why none did. */
function openLibc<Fns extends Record<string, FFIFunction>>(symbols: Fns): { lib: Library<Fns> } | { failure: string } {
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

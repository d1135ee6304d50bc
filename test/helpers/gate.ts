/**
 * A shell stage's wait for a gate file the test creates when it lets the
 * stage go (`untilExists(path)` is POSIX sh, for `ctx.shell`).
 *
 * Each poll is a fork and an exec of `sleep`, about 5 ms of CPU on these
 * machines; a loop of `sleep 0.02` is a quarter of a core for as long as
 * the gate stays shut, and the suite is bound by CPU (docs/design/testing.md
 * "Gates in shell stages"). The interval grows instead: 20 ms, 50 ms, 100 ms,
 * then 200 ms, so a gate opened at once is seen at once and one held for
 * seconds costs five execs a second.
 *
 * `path` is inserted as written: quote it for the shell yourself. The loop
 * is one compound command (braces), so it composes with `&&` and `;`.
 * Imported by workflow fixtures too (the binary bundles them): import
 * nothing here.
 */
export function untilExists(path: string): string {
  return `{ _gate_wait=0.02; until [ -e ${path} ]; do sleep $_gate_wait; case $_gate_wait in 0.02) _gate_wait=0.05;; 0.05) _gate_wait=0.1;; *) _gate_wait=0.2;; esac; done; }`;
}

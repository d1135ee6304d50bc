/**
 * Safe ways to put values into a shell stage (ctx.shell, ctx.task's
 * `shell`). A command *string* is shell code: `/bin/sh -c` interprets every
 * space, quote, `$(…)`, `;` and newline in it, including those inside an
 * interpolated value. Two forms pass values literally:
 *
 * - argv, `ctx.shell("grep", ["grep", "-e", pattern, file])`: no shell at
 *   all; the first element is the program (looked up in PATH), each other
 *   element is one argument, exactly as given. `checkArgv` is the rule.
 * - the `sh` template, `ctx.shell("grep", sh`grep -e ${pattern} ${file}`)`:
 *   still shell code (pipes, redirections, `&&` work), but every
 *   interpolated value becomes one single-quoted word; an array becomes one
 *   word per element.
 */

/** A value `sh` can quote: one word, or one word per element of an array. */
export type ShellValue = string | number | bigint | boolean | readonly (string | number | bigint | boolean)[];

/** `value` as one POSIX shell word that the shell reads back exactly (single quotes; a quote inside as '\''). */
export function quoteShell(value: string): string {
  if (value.includes("\0")) throw new TypeError("a shell argument cannot contain a NUL byte");
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

function word(value: unknown, index: number): string {
  if (typeof value === "string") return quoteShell(value);
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return quoteShell(String(value));
  throw new TypeError(`sh\`…\`: value ${index + 1} is ${value === null ? "null" : typeof value}; interpolate a string, a number, a boolean or an array of them`);
}

/**
 * A tagged template for shell commands: the literal text is shell code as
 * written, each `${value}` is quoted so the shell sees it as one argument
 * (an array: one argument per element). Returns the command string.
 * Throws a TypeError for an object, null or undefined value, or a NUL byte.
 */
export function sh(strings: TemplateStringsArray, ...values: ShellValue[]): string {
  let out = strings[0] ?? "";
  values.forEach((value, i) => {
    out += Array.isArray(value) ? value.map((v: unknown) => word(v, i)).join(" ") : word(value, i);
    out += strings[i + 1] ?? "";
  });
  return out;
}

/** Why `argv` cannot be run as a program and its arguments, or undefined when it can. */
export function checkArgv(argv: readonly unknown[]): string | undefined {
  if (argv.length === 0) return "the argv form needs at least the program to run (it is empty)";
  for (const [i, a] of argv.entries()) {
    if (typeof a !== "string") return `argv[${i}] is ${a === null ? "null" : typeof a}, not a string`;
    if (a.includes("\0")) return `argv[${i}] contains a NUL byte`;
  }
  if (argv[0] === "") return "argv[0], the program to run, is empty";
  return undefined;
}

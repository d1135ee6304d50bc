/**
 * Which scripted entry applies to a stage, a command or a question: the
 * key equal to one of the names, else the first key whose glob pattern
 * (Bun.Glob: `*`, `?`, `[ab]`, `{a,b}`) matches one of them.
 */

export function matchKey<T>(table: Record<string, T> | undefined, ...names: (string | undefined)[]): [string, T] | undefined {
  if (!table) return undefined;
  const candidates = names.filter((n): n is string => typeof n === "string" && n !== "");
  for (const n of candidates) if (Object.hasOwn(table, n)) return [n, table[n]!];
  for (const key of Object.keys(table)) {
    const glob = new Bun.Glob(key);
    if (candidates.some((n) => glob.match(n))) return [key, table[key]!];
  }
  return undefined;
}

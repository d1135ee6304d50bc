/**
 * "Did you mean …": the candidates closest to what a user typed (a command,
 * a builtin's name, a stage path, a step name, a run id), by edit distance
 * (Levenshtein) and shared prefix. No package of the project computes an
 * edit distance; this is the one place that does.
 */

/** Up to `limit` of `candidates` closest to `wanted` (edit distance, then shared prefix), for "did you mean". */
export function closeMatches(wanted: string, candidates: Iterable<string>, limit = 5): string[] {
  const w = wanted.toLowerCase();
  const scored: { c: string; d: number }[] = [];
  for (const c of new Set(candidates)) {
    const lc = c.toLowerCase();
    const d = editDistance(w, lc);
    const last = lc.split("/").at(-1) ?? lc;
    const near = d <= Math.max(2, Math.floor(w.length / 3)) || lc.includes(w) || w.includes(last) || editDistance(w.split("/").at(-1) ?? w, last) <= 2;
    if (near) scored.push({ c, d });
  }
  scored.sort((a, b) => a.d - b.d || a.c.localeCompare(b.c));
  return scored.slice(0, limit).map((s) => s.c);
}

function editDistance(a: string, b: string): number {
  if (a === b) return 0;
  if (Math.abs(a.length - b.length) > 20) return Math.abs(a.length - b.length);
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}

/**
 * Pinned code: the contract for the workflow code each run records when it
 * starts (docs/design/journal.md, "Pinned code").
 *
 * A run's code is its workflow file and every local module it imports.
 * Each file is stored once, content-addressed (its sha256), however many
 * runs use it; a manifest (JSON: the entry file and each file's path
 * relative to the entry's directory with its digest) is stored the same
 * way, and its digest is the run's code version, kept in the run's
 * `workflowDigest`. Runs recorded before pinning keep the entry file's own
 * digest there, for which no manifest is stored.
 *
 * Files are written before the run that uses them is recorded (insert or
 * touch: a digest already stored keeps its content and counts as stored
 * now). `sweep` deletes what no remaining run's manifest names, among
 * files stored before a time: gc calls it with its own cutoff, so a file
 * written for a run that is starting right now is not taken away.
 */

export interface CodeFile {
  /** sha256 of the content, in hex. */
  digest: string;
  content: Uint8Array;
}

/** A run's code: what the manifest stored under the code version says. */
export interface CodeManifest {
  /** The workflow file, relative to its own directory (its base name). */
  entry: string;
  /** Every file, by path relative to the entry's directory ("lib/x.ts", "../shared/y.ts"), to its digest. */
  files: Record<string, string>;
}

export interface CodeStore {
  /** Stores the files (content-addressed: a digest already stored is only touched). */
  put(files: readonly CodeFile[], at: number): Promise<void>;
  /** The stored files among `digests` (missing ones are left out). */
  get(digests: readonly string[]): Promise<Map<string, Uint8Array>>;
  /** Deletes stored files that no run's manifest names, stored (or touched) before `before`; how many. */
  sweep(before: number): Promise<number>;
}

/** The manifest stored under `digest`, or undefined when the content is not a manifest. */
export function parseManifest(content: Uint8Array): CodeManifest | undefined {
  try {
    const m = JSON.parse(new TextDecoder().decode(content)) as Partial<CodeManifest>;
    if (typeof m.entry !== "string" || !m.files || typeof m.files !== "object") return undefined;
    return m as CodeManifest;
  } catch {
    return undefined;
  }
}

/** The digests a set of stored manifests keeps: each manifest's own and its files'. */
export function keptDigests(manifests: ReadonlyMap<string, Uint8Array>): Set<string> {
  const kept = new Set<string>();
  for (const [digest, content] of manifests) {
    const m = parseManifest(content);
    if (!m) continue;
    kept.add(digest);
    for (const d of Object.values(m.files)) kept.add(d);
  }
  return kept;
}

/**
 * Builtin workflows: the sources under src/workflows/, embedded in the
 * binary as text (Bun's `with { type: "text" }` import) and loaded the way
 * a user's file is, so each is also a file a user can print and copy.
 *
 * A run of a builtin records `builtin:<name>` as its workflow path and the
 * sha256 of the embedded source as its digest; resume finds it by that
 * name again (loadWorkflowFile takes the same reference), and a binary
 * whose builtin changed shows as a changed digest, like an edited file.
 *
 * Loading: the text is written to a private temp directory (0700, made
 * fresh by mkdtemp) and imported from there, through the same "atomic"
 * module registration as any workflow file; the copy is removed once
 * imported (Bun has transpiled it by then).
 */

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
// Each import is the file's text, not the module (the bundler embeds it verbatim).
import adversarialVerification from "../workflows/adversarial-verification.ts" with { type: "text" };
import bestOfN from "../workflows/best-of-n.ts" with { type: "text" };
import classifyAndAct from "../workflows/classify-and-act.ts" with { type: "text" };
import openClaudeDesign from "../workflows/open-claude-design.ts" with { type: "text" };
import fanOutAndSynthesize from "../workflows/fan-out-and-synthesize.ts" with { type: "text" };
import generateAndFilter from "../workflows/generate-and-filter.ts" with { type: "text" };
import goal from "../workflows/goal.ts" with { type: "text" };
import loopUntilDone from "../workflows/loop-until-done.ts" with { type: "text" };
import ralph from "../workflows/ralph.ts" with { type: "text" };
import tournament from "../workflows/tournament.ts" with { type: "text" };

const SOURCES: Record<string, string> = {
  "adversarial-verification": adversarialVerification as unknown as string,
  "best-of-n": bestOfN as unknown as string,
  "classify-and-act": classifyAndAct as unknown as string,
  "fan-out-and-synthesize": fanOutAndSynthesize as unknown as string,
  "generate-and-filter": generateAndFilter as unknown as string,
  goal: goal as unknown as string,
  "loop-until-done": loopUntilDone as unknown as string,
  "open-claude-design": openClaudeDesign as unknown as string,
  ralph: ralph as unknown as string,
  tournament: tournament as unknown as string,
};

/** Other names of a builtin (the name it had before it took the reference's). */
export const BUILTIN_ALIASES: Record<string, string> = { design: "open-claude-design" };

export const BUILTIN_PREFIX = "builtin:";

/** The builtins' own names (not their aliases). */
export function builtinNames(): string[] {
  return Object.keys(SOURCES).sort();
}

/** A builtin's source, by its name or an alias. */
export function builtinSource(name: string): string | undefined {
  const own = Object.hasOwn(BUILTIN_ALIASES, name) ? BUILTIN_ALIASES[name]! : name;
  return Object.hasOwn(SOURCES, own) ? SOURCES[own] : undefined;
}

export function builtinDigest(name: string): string {
  return new Bun.CryptoHasher("sha256").update(builtinSource(name) ?? "").digest("hex");
}

/** Writes the builtin's source to a private temp file, runs `load` on it, and removes the copy. */
export async function withBuiltinFile<T>(name: string, load: (path: string) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), "atomic-builtin-"));
  try {
    const path = join(dir, `${name}.ts`);
    writeFileSync(path, builtinSource(name) ?? "", { mode: 0o600 });
    return await load(path);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

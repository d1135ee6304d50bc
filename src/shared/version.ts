/**
 * The product version (from package.json) and what scripts/build.ts fixed
 * into this binary: the commit it was built from, when, and for which
 * platform. Run from source (tests, `bun src/main.ts`) the build fields
 * say "source" and the date is null.
 */

import pkg from "../../package.json" with { type: "json" };

// Replaced by the bundler (scripts/build.ts `define`); undeclared when run from source.
declare const ATOMIC_BUILD_COMMIT: string;
declare const ATOMIC_BUILD_DATE: string;
declare const ATOMIC_BUILD_TARGET: string;

export const VERSION: string = pkg.version;

export interface BuildInfo {
  version: string;
  /** The git commit (40 hex digits, "-dirty" when the tree had changes), or "source". */
  commit: string;
  /** ISO 8601 UTC time of the build, or null from source. */
  buildDate: string | null;
  /** Bun's compile target, e.g. bun-linux-x64, or "source". */
  target: string;
  bun: string;
}

export function buildInfo(): BuildInfo {
  return {
    version: VERSION,
    commit: typeof ATOMIC_BUILD_COMMIT === "string" ? ATOMIC_BUILD_COMMIT : "source",
    buildDate: typeof ATOMIC_BUILD_DATE === "string" ? ATOMIC_BUILD_DATE : null,
    target: typeof ATOMIC_BUILD_TARGET === "string" ? ATOMIC_BUILD_TARGET : "source",
    bun: Bun.version,
  };
}

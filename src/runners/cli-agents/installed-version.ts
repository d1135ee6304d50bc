/**
 * Which version of a CLI agent a stage is about to run, read from where it
 * is installed, without starting it (a node-based CLI takes seconds to say
 * its version on a busy host; `atomic doctor` asks the CLI itself):
 * - an npm install (`npm install -g`, a project's node_modules): the
 *   binary's real path lies inside the package, whose package.json names it;
 * - Claude Code's own installer: the real path ends in a folder or file
 *   named by the version (~/.local/share/claude/versions/2.1.332).
 * Anything else (a wrapper script, a build of one's own) has no version
 * here, and no warning is given for it.
 *
 * `untestedVersion` is the one warning line a run prints (and records on
 * the stage, so `atomic show` has it) the first time it uses a CLI at a
 * version the real-CLI tests have not covered (tested-versions.ts).
 */

import { existsSync, readFileSync, realpathSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { AGENT_NEEDS, versionNumber } from "./tested-versions.ts";

/** Each CLI's npm package. */
export const PACKAGES: Readonly<Record<string, string>> = {
  claude: "@anthropic-ai/claude-code",
  codex: "@openai/codex",
  gemini: "@google/gemini-cli",
  opencode: "opencode-ai",
  pi: "@mariozechner/pi-coding-agent",
};

const cache = new Map<string, string | undefined>();

/** The version of the CLI installed at `binary`, when its install says it. */
export function installedVersion(kind: string, binary: string): string | undefined {
  const key = `${kind}\0${binary}`;
  if (!cache.has(key)) cache.set(key, readVersion(kind, binary));
  return cache.get(key);
}

function readVersion(kind: string, binary: string): string | undefined {
  let real: string;
  try {
    real = realpathSync(binary);
  } catch {
    return undefined;
  }
  const pkg = PACKAGES[kind];
  for (let dir = dirname(real); pkg && dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, "package.json");
    if (!existsSync(file)) continue;
    try {
      const json = JSON.parse(readFileSync(file, "utf8")) as { name?: unknown; version?: unknown };
      if (json.name === pkg && typeof json.version === "string") return versionNumber(json.version);
    } catch {
      // not a package.json we can read: look further up
    }
  }
  const named = basename(real);
  return /^\d+\.\d+\.\d+$/.test(named) ? named : undefined;
}

/** The warning for a CLI at a version the tests have not covered; undefined when it was tested or its version is unknown. */
export function untestedVersion(kind: string, binary: string): string | undefined {
  const tested = AGENT_NEEDS[kind]?.tested;
  const version = tested ? installedVersion(kind, binary) : undefined;
  if (!tested || !version || tested.includes(version)) return undefined;
  return `the ${kind} CLI here is version ${version}, which atomic's tests have not covered (tested: ${tested.join(", ")}); its usage figures and events may differ`;
}

/**
 * Options every command takes, wherever they appear on the command line
 * (`atomic --json runs` and `atomic runs --json` alike). They are lifted out
 * of argv before citty parses the command's own arguments.
 */

import { homedir } from "node:os";
import { resolve } from "node:path";
import { UsageError } from "../shared/errors.ts";
import type { Durability } from "../journal/journal.ts";
import { invalidEnv, readEnv, type EnvSource } from "../shared/config/environment.ts";

export interface GlobalOptions {
  home: string;
  journal: string | undefined;
  json: boolean;
  quiet: boolean;
  verbose: boolean;
  color: boolean;
  durability: Durability;
  /** This host's identity for leases (--host-id / ATOMIC_HOST_ID); undefined: detected (src/shared/process-info.ts). */
  hostId: string | undefined;
}

export const VALUE_FLAGS = ["home", "journal", "durability", "host-id"] as const;
export const BOOL_FLAGS = ["json", "quiet", "verbose", "no-color"] as const;

export const GLOBAL_HELP = [
  ["--home DIR", "where atomic keeps its journal and artifacts (ATOMIC_HOME, default ~/.atomic)"],
  ["--journal URL", "a shared Postgres journal, postgres://user@host:5432/db?schema=atomic (ATOMIC_JOURNAL; password from PGPASSWORD or ~/.pgpass)"],
  ["--durability full|normal", "full (default): a recorded step survives power loss; normal: faster, may lose the last steps on power loss"],
  ["--host-id ID", "this host's identity in leases (ATOMIC_HOST_ID; default: machine id + boot id + pid namespace)"],
  ["--json", "machine-readable output (NDJSON for streams)"],
  ["--quiet", "print only results and errors"],
  ["--verbose", "print stack traces and debug detail"],
  ["--no-color", "no colours (also NO_COLOR)"],
] as const;

export function liftGlobals(argv: readonly string[], env?: EnvSource): { globals: GlobalOptions; rest: string[] } {
  const values: Record<string, string> = {};
  const flags = new Set<string>();
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      rest.push(...argv.slice(i));
      break;
    }
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    const name = m?.[1];
    if (name && (VALUE_FLAGS as readonly string[]).includes(name)) {
      const value = m[2] ?? argv[++i];
      if (value === undefined || value.startsWith("--")) {
        throw new UsageError("bad_flag", `--${name} needs a value`, { hint: "see atomic --help" });
      }
      values[name] = value;
    } else if (name && (BOOL_FLAGS as readonly string[]).includes(name) && m[2] === undefined) {
      flags.add(name);
    } else {
      rest.push(arg);
    }
  }
  const durability = values.durability ?? readEnv("ATOMIC_DURABILITY", env) ?? "full";
  if (durability !== "full" && durability !== "normal") {
    throw new UsageError("bad_flag", `--durability must be "full" or "normal", got ${JSON.stringify(durability)}`);
  }
  const invalid = invalidEnv(env);
  if (invalid) {
    throw new UsageError("bad_config", `${invalid.name} must be ${invalid.what}, got ${JSON.stringify(invalid.raw)}`, { hint: `for example ${invalid.name}=${invalid.example}, or unset it` });
  }
  // An empty ATOMIC_HOME is unset, not the current directory.
  const home = resolve(values.home ?? readEnv("ATOMIC_HOME", env) ?? resolve(homedir(), ".atomic"));
  return {
    globals: {
      home,
      journal: values.journal ?? readEnv("ATOMIC_JOURNAL", env),
      json: flags.has("json"),
      quiet: flags.has("quiet"),
      verbose: flags.has("verbose") || readEnv("ATOMIC_VERBOSE", env),
      color: !flags.has("no-color") && !readEnv("NO_COLOR", env) && readEnv("TERM", env) !== "dumb",
      durability,
      hostId: values["host-id"]?.trim() || readEnv("ATOMIC_HOST_ID", env),
    },
    rest,
  };
}

/** All values of a repeatable flag (`--input a=1 --input b=2`), in order. */
export function repeatedFlag(argv: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") break;
    if (arg === `--${name}`) {
      const value = argv[i + 1];
      if (value === undefined) throw new UsageError("bad_flag", `--${name} needs a value`);
      out.push(value);
      i++;
    } else if (arg.startsWith(`--${name}=`)) {
      out.push(arg.slice(name.length + 3));
    }
  }
  return out;
}

/**
 * Loading the configuration, the only code that reads a config file:
 * `$ATOMIC_HOME/config.json`, then `.atomic/config.json` in the project
 * (the current directory), then the file ATOMIC_CONFIG names; a later
 * file wins key by key (sections merge one level deep: `runners.claude` in
 * the project replaces the home's `runners.claude`). Then the environment
 * overrides three keys: ATOMIC_RUNNER, ATOMIC_MODEL, ATOMIC_OPENAI_BASE_URL.
 *
 * Each file is checked against the schema (schema.ts) once, here: a file
 * that is not JSON, or holds a key of the wrong type, is a usage error of
 * one sentence naming the file and the key, with a hint.
 */

import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import * as v from "valibot";
import { UsageError } from "../errors.ts";
import { runtimeDir } from "../runtime-dir.ts";
import { readEnv, type EnvSource } from "./environment.ts";
import { ConfigSchema, keyInfoAt, type AtomicConfig } from "./schema.ts";

export interface LoadedConfig {
  config: AtomicConfig;
  /** Files that were read, in order (home, then project, then ATOMIC_CONFIG's). */
  files: string[];
}

/** Where a bad value is told to look. */
export const CONFIG_REFERENCE_HINT = "see docs/reference/config.md for every key, its type and default";

export function loadConfig(opts: { home: string; cwd?: string; env?: EnvSource }): LoadedConfig {
  const files: string[] = [];
  let config: AtomicConfig = {};
  const named = readEnv("ATOMIC_CONFIG", opts.env);
  const extra = named ? [resolve(named)] : [];
  for (const file of [join(opts.home, "config.json"), resolve(opts.cwd ?? process.cwd(), ".atomic", "config.json"), ...extra]) {
    if (extra.includes(file) && !existsSync(file)) {
      throw new UsageError("bad_config", `ATOMIC_CONFIG names ${file}, which does not exist`, { hint: "point ATOMIC_CONFIG at a JSON config file, or unset it" });
    }
    if (!existsSync(file) || files.includes(file)) continue;
    config = merge(config, readConfigFile(file));
    files.push(file);
  }
  const runner = readEnv("ATOMIC_RUNNER", opts.env);
  const model = readEnv("ATOMIC_MODEL", opts.env);
  const baseUrl = readEnv("ATOMIC_OPENAI_BASE_URL", opts.env);
  if (runner) config.runner = runner;
  if (model) config.model = model;
  if (baseUrl) config.openai = { ...config.openai, baseUrl };
  return { config, files };
}

/** One config file, checked: its settings, or a UsageError naming the file and the first bad key. */
export function readConfigFile(file: string): AtomicConfig {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new UsageError("bad_config", `the config file ${file} is not valid JSON (${(err as Error).message})`, { hint: "fix the file or move it away" });
  }
  const parsed = v.safeParse(ConfigSchema, value, { abortEarly: true });
  if (parsed.success) return parsed.output;
  const issue = parsed.issues[0];
  // An array's item is named by its array ("runners.claude.args", not "runners.claude.args.2").
  const path = (issue.path ?? []).filter((p) => p.type !== "array").map((p) => String(p.key));
  if (path.length === 0) throw new UsageError("bad_config", `the config file ${file} must hold a JSON object`, { hint: 'write it as {"runner": "openai", ...}' });
  const key = path.join(".");
  throw new UsageError("bad_config", `"${key}" in ${file} must be ${issue.message}`, { hint: keyInfoAt(path)?.hint ?? CONFIG_REFERENCE_HINT });
}

function merge(base: AtomicConfig, over: AtomicConfig): AtomicConfig {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) continue;
    const b = out[k];
    out[k] = isObject(b) && isObject(v) ? { ...b, ...v } : v;
  }
  return out as AtomicConfig;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Where this user's agent session slots live unless configured: the runtime directory (shared/runtime-dir.ts). */
export function defaultSlotsDir(home: string): string {
  return join(runtimeDir(home), "agent-slots");
}

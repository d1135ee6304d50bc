/**
 * User configuration: `$ATOMIC_HOME/config.json`, then `.atomic/config.json`
 * in the project (the current directory), project wins key by key (objects
 * merge one level deep: `runners.claude` in the project replaces the home's
 * `runners.claude`), then environment overrides:
 *
 *   ATOMIC_RUNNER            default runner for prompt stages
 *   ATOMIC_MODEL             default model
 *   ATOMIC_OPENAI_BASE_URL   base URL of the OpenAI-compatible endpoint
 *   OPENAI_API_KEY           its key (never written anywhere: workers read it
 *                            from their own environment)
 *
 * Everything is plain data, checked here once: a config file that is not
 * JSON, or has a field of the wrong type, is a usage error naming the file
 * and the key. Unknown keys are kept (and ignored) so a newer config works
 * with an older atomic.
 */

import { existsSync, readFileSync } from "node:fs";
import { isAbsolute, join, resolve } from "node:path";
import { UsageError } from "./errors.ts";
import { runtimeDir } from "./runtime-dir.ts";
import { AGE_EXAMPLES, parseAge } from "./age.ts";

/** The artifact store's chunk (artifacts/store.ts CHUNK_BYTES), the smallest per-file cap: shared/ imports nothing above it. */
const CHUNK_BYTES = 256 * 1024;

/** Price of a model in USD per million tokens. */
export interface ModelPrice {
  inputPerMTok?: number;
  outputPerMTok?: number;
  cacheReadPerMTok?: number;
  cacheWritePerMTok?: number;
}

export interface CliRunnerConfig {
  /** The binary (a path, or a name looked up on PATH). */
  path?: string;
  /** Extra arguments added to every invocation. */
  args?: string[];
}

export interface AdmissionConfig {
  /** Concurrent agent sessions per run (default 4). */
  maxSessionsPerRun?: number;
  /** Concurrent agent sessions of this user across all runs on the host (default 8). */
  maxSessionsPerUser?: number;
  /** Stage starts are paced while the 1-minute load per CPU is above this (default 3). */
  maxLoadPerCpu?: number;
  /** ... or while free memory is below this many MB (default 256). */
  minFreeMemoryMb?: number;
  /** Spacing of stage starts under pressure, in ms (default 1000). */
  paceMs?: number;
  /** Where the per-user session slots live (default: <tmp>/atomic-<user>/agent-slots). */
  slotsDir?: string;
}

export interface BudgetConfig {
  maxCostUsd?: number;
  maxTokens?: number;
  maxDurationMs?: number;
  /** Warn once when this percent of any limit is used (default 80). */
  warnAtPercent?: number;
}

/**
 * Retention the service applies daily (engine/retention.ts): `{ "olderThan":
 * "30d", "status": ["completed", "cancelled", "failed"] }`. `status`
 * defaults to those finished statuses and may name only them: the service
 * never deletes a run that could still continue. Absent: nothing is deleted.
 */
export interface RetentionConfig {
  olderThan?: string;
  status?: string[];
}

const RETENTION_STATUSES = ["completed", "cancelled", "failed"];

export interface AtomicConfig {
  /** Default runner of prompt stages (ATOMIC_RUNNER; default "openai"). */
  runner?: string;
  /** Default model (ATOMIC_MODEL). */
  model?: string;
  openai?: {
    baseUrl?: string;
    /** Retries of a request on 429/5xx/network errors (default 4). */
    maxRetries?: number;
    /** Longest wait between retries in ms, Retry-After included (default 30000). */
    maxBackoffMs?: number;
    /** Per-request timeout in ms (default 300000). */
    requestTimeoutMs?: number;
  };
  /** CLI agents by runner name: claude, codex, gemini, opencode, pi. */
  runners?: Record<string, CliRunnerConfig>;
  /** Prices by model name (exact, else the longest configured prefix). */
  pricing?: Record<string, ModelPrice>;
  admission?: AdmissionConfig;
  budget?: BudgetConfig;
  retention?: RetentionConfig;
  artifacts?: ArtifactsConfig;
}

/**
 * Where stage files go so that every host of a shared journal reads them
 * (artifacts/select.ts): `{ "dir": "/mnt/shared/atomic" }` names a
 * directory every host mounts (any journal); without it a Postgres journal
 * keeps them in its database. `maxFileBytes` caps each file (default 64 MiB;
 * at least 256 KiB): past it the head is dropped and the tail kept.
 */
export interface ArtifactsConfig {
  dir?: string;
  maxFileBytes?: number;
}

export const DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1";
export const DEFAULT_RUNNER = "openai";

export interface LoadedConfig {
  config: AtomicConfig;
  /** Files that were read, in order (home, then project, then ATOMIC_CONFIG's). */
  files: string[];
}

export function loadConfig(opts: { home: string; cwd?: string; env?: NodeJS.ProcessEnv }): LoadedConfig {
  const env = opts.env ?? process.env;
  const files: string[] = [];
  let config: AtomicConfig = {};
  // ATOMIC_CONFIG names one more file, read last (the environment wins): settings for one shell or one CI job.
  const extra = env.ATOMIC_CONFIG ? [resolve(env.ATOMIC_CONFIG)] : [];
  for (const file of [join(opts.home, "config.json"), resolve(opts.cwd ?? process.cwd(), ".atomic", "config.json"), ...extra]) {
    if (extra.includes(file) && !existsSync(file)) {
      throw new UsageError("bad_config", `ATOMIC_CONFIG names ${file}, which does not exist`, { hint: "point ATOMIC_CONFIG at a JSON config file, or unset it" });
    }
    if (!existsSync(file) || files.includes(file)) continue;
    config = merge(config, readConfigFile(file));
    files.push(file);
  }
  if (env.ATOMIC_RUNNER) config.runner = env.ATOMIC_RUNNER;
  if (env.ATOMIC_MODEL) config.model = env.ATOMIC_MODEL;
  if (env.ATOMIC_OPENAI_BASE_URL) config.openai = { ...config.openai, baseUrl: env.ATOMIC_OPENAI_BASE_URL };
  return { config, files };
}

function readConfigFile(file: string): AtomicConfig {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new UsageError("bad_config", `the config file ${file} is not valid JSON (${(err as Error).message})`, {
      hint: "fix the file or move it away",
    });
  }
  if (!isObject(value)) throw new UsageError("bad_config", `the config file ${file} must hold a JSON object`, { hint: 'write it as {"runner": "openai", ...}' });
  checkConfig(value, file);
  return value as AtomicConfig;
}

function checkConfig(c: Record<string, unknown>, file: string): void {
  const bad = (key: string, want: string, hint = "see the README section on agent runners"): never => {
    throw new UsageError("bad_config", `"${key}" in ${file} must be ${want}`, { hint });
  };
  const str = (v: unknown, key: string) => v === undefined || typeof v === "string" || bad(key, "a string");
  const num = (v: unknown, key: string) => v === undefined || (typeof v === "number" && Number.isFinite(v) && v >= 0) || bad(key, "a non-negative number");
  const obj = (v: unknown, key: string) => v === undefined || isObject(v) || bad(key, "an object");
  str(c.runner, "runner");
  str(c.model, "model");
  obj(c.openai, "openai");
  if (isObject(c.openai)) {
    str(c.openai.baseUrl, "openai.baseUrl");
    for (const k of ["maxRetries", "maxBackoffMs", "requestTimeoutMs"]) num(c.openai[k], `openai.${k}`);
  }
  obj(c.runners, "runners");
  if (isObject(c.runners)) {
    for (const [name, r] of Object.entries(c.runners)) {
      if (!isObject(r)) bad(`runners.${name}`, "an object");
      const rc = r as Record<string, unknown>;
      str(rc.path, `runners.${name}.path`);
      if (rc.args !== undefined && !(Array.isArray(rc.args) && rc.args.every((a) => typeof a === "string"))) bad(`runners.${name}.args`, "an array of strings");
    }
  }
  obj(c.pricing, "pricing");
  if (isObject(c.pricing)) {
    for (const [model, p] of Object.entries(c.pricing)) {
      if (!isObject(p)) bad(`pricing.${model}`, "an object");
      for (const k of ["inputPerMTok", "outputPerMTok", "cacheReadPerMTok", "cacheWritePerMTok"]) num((p as Record<string, unknown>)[k], `pricing.${model}.${k}`);
    }
  }
  obj(c.admission, "admission");
  if (isObject(c.admission)) {
    for (const k of ["maxSessionsPerRun", "maxSessionsPerUser", "maxLoadPerCpu", "minFreeMemoryMb", "paceMs"]) num(c.admission[k], `admission.${k}`);
    str(c.admission.slotsDir, "admission.slotsDir");
  }
  obj(c.budget, "budget");
  if (isObject(c.budget)) {
    for (const k of ["maxCostUsd", "maxTokens", "maxDurationMs", "warnAtPercent"]) num(c.budget[k], `budget.${k}`);
  }
  obj(c.artifacts, "artifacts");
  if (isObject(c.artifacts)) {
    const { dir } = c.artifacts;
    const hint = 'see "Stage files on several machines" in the README';
    if (dir !== undefined && (typeof dir !== "string" || !isAbsolute(dir))) bad("artifacts.dir", "an absolute path (a directory every host mounts)", hint);
    const max = c.artifacts.maxFileBytes;
    if (max !== undefined && !(typeof max === "number" && Number.isInteger(max) && max >= CHUNK_BYTES)) bad("artifacts.maxFileBytes", `a whole number of bytes, at least ${CHUNK_BYTES}`, hint);
  }
  obj(c.retention, "retention");
  if (isObject(c.retention)) {
    const { olderThan, status } = c.retention;
    if (olderThan !== undefined && (typeof olderThan !== "string" || parseAge(olderThan) === undefined)) bad("retention.olderThan", `an age like ${AGE_EXAMPLES}`);
    if (status !== undefined && !(Array.isArray(status) && status.every((x) => RETENTION_STATUSES.includes(x as string)))) {
      bad("retention.status", `an array of ${RETENTION_STATUSES.join(", ")}`);
    }
  }
}

function merge(base: AtomicConfig, over: AtomicConfig): AtomicConfig {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) {
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

/** The price of `model`: an exact entry, else the longest configured prefix ("gpt-4o" prices "gpt-4o-2024-08-06"). */
export function priceOf(pricing: Record<string, ModelPrice> | undefined, model: string | undefined): ModelPrice | undefined {
  if (!pricing || !model) return undefined;
  if (pricing[model]) return pricing[model];
  let best: string | undefined;
  for (const key of Object.keys(pricing)) if (model.startsWith(key) && (!best || key.length > best.length)) best = key;
  return best ? pricing[best] : undefined;
}

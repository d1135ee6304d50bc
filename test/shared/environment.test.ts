/**
 * shared/config/environment.ts: the one registry of environment variables.
 * The sources under src/ are scanned (comments stripped by Bun's
 * transpiler) so that no file but the registry reads the process's
 * environment; the registry's parsing, defaults and child environments are
 * checked in this process.
 */

import { afterEach, expect, test } from "bun:test";
import { Glob } from "bun";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../helpers/atomic.ts";
import { CREDENTIAL_VARIABLES, KEPT_FROM_STAGES, VARIABLES, childEnv, readEnv, setEnv, takeEnv, type VariableName } from "../../src/shared/config/environment.ts";

const REGISTRY = "src/shared/config/environment.ts";
/** The builtin workflows are workflow files, loaded as text: they import only "atomic" and read their environment as any workflow may. */
const WORKFLOWS = "src/workflows/";
/** pi's extension: embedded as text and run inside pi, not in atomic's process; what it reads is registered all the same. */
const PI_EXTENSION = "src/runners/cli-agents/pi-run-tools.ts";
const ENV_READ = /\bprocess\s*(?:\.\s*env\b|\[\s*["'`]env["'`]\s*\])|\bBun\s*\.\s*env\b|\bimport\.meta\.env\b/g;

const transpiler = new Bun.Transpiler({ loader: "ts", trimUnusedImports: false });

function sources(): { file: string; code: string }[] {
  const out: { file: string; code: string }[] = [];
  for (const file of new Glob("src/**/*.ts").scanSync(ROOT)) out.push({ file, code: transpiler.transformSync(readFileSync(join(ROOT, file), "utf8")) });
  return out;
}

const saved = { ...process.env };
afterEach(() => {
  for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
  Object.assign(process.env, saved);
});

test("no file under src/ but the registry reads process.env (or Bun.env, import.meta.env)", () => {
  const all = sources();
  expect(all.length).toBeGreaterThan(100);
  const readers = all.filter((s) => s.file !== REGISTRY && s.file !== PI_EXTENSION && !s.file.startsWith(WORKFLOWS) && ENV_READ.test(s.code)).map((s) => s.file);
  expect(readers).toEqual([]);
  expect(ENV_READ.test(all.find((s) => s.file === REGISTRY)!.code)).toBe(true);
});

test("what the builtin workflows read of their environment is registered", () => {
  const named = new Set<string>();
  for (const s of sources().filter((x) => x.file.startsWith(WORKFLOWS))) {
    for (const m of s.code.matchAll(/\bprocess\.env\.([A-Z_][A-Z0-9_]*)/g)) named.add(m[1]!);
    expect(s.code.replace(/\bprocess\.env\.[A-Z_][A-Z0-9_]*/g, "")).not.toMatch(ENV_READ);
  }
  expect([...named].filter((n) => !(n in VARIABLES))).toEqual([]);
});

test("every ATOMIC_ variable that src/ names is registered", () => {
  const identifiers = new Set<string>();
  const names = new Set<string>();
  for (const s of sources()) {
    const text = readFileSync(join(ROOT, s.file), "utf8");
    // Constants of the code, and the build's defines (`declare const ATOMIC_BUILD_DATE`), are not variables.
    for (const m of text.matchAll(/\b(?:const|let|var|function|class)\s+(ATOMIC_[A-Z0-9_]+)/g)) identifiers.add(m[1]!);
    for (const m of text.matchAll(/\bATOMIC_[A-Z0-9_]*[A-Z0-9]\b/g)) names.add(m[0]);
  }
  const missing = [...names].filter((n) => !identifiers.has(n) && !(n in VARIABLES) && !n.startsWith("ATOMIC_TEST_"));
  expect(missing).toEqual([]);
});

test("every variable has an audience, a type and a description; credentials and internal configuration are kept from stages", () => {
  for (const [name, v] of Object.entries(VARIABLES)) {
    expect(`${name}: ${v.type} ${v.description.length > 10}`).toBe(`${name}: ${v.type} true`);
    expect(["user", "stage", "credential", "external", "internal", "testing"]).toContain(v.audience);
  }
  expect(CREDENTIAL_VARIABLES).toContain("OPENAI_API_KEY");
  expect(CREDENTIAL_VARIABLES).toContain("ATOMIC_JOURNAL");
  expect(CREDENTIAL_VARIABLES).toContain("PGPASSWORD");
  for (const n of [...CREDENTIAL_VARIABLES, "ATOMIC_POOL_CONFIG", "ATOMIC_USER_UMASK"] as VariableName[]) expect(KEPT_FROM_STAGES).toContain(n);
  expect(KEPT_FROM_STAGES).not.toContain("ATOMIC_HOME");
  expect(KEPT_FROM_STAGES).not.toContain("ATOMIC_ROOT_RUN_ID");
});

test("readEnv parses, applies the registry's default, and counts a value that does not parse (or an empty one) as unset", () => {
  expect(readEnv("ATOMIC_HOST_LOST_MS", {})).toBe(10_000);
  expect(readEnv("ATOMIC_HOST_LOST_MS", { ATOMIC_HOST_LOST_MS: "2500" })).toBe(2500);
  expect(readEnv("ATOMIC_HOST_LOST_MS", { ATOMIC_HOST_LOST_MS: "soon" })).toBe(10_000);
  expect(readEnv("ATOMIC_HOST_LOST_MS", { ATOMIC_HOST_LOST_MS: "-5" })).toBe(10_000);
  // Below two heartbeats a live host would show lost between them: the least is 2 s.
  expect(readEnv("ATOMIC_HOST_LOST_MS", { ATOMIC_HOST_LOST_MS: "100" })).toBe(2_000);
  expect(readEnv("ATOMIC_HOME", { ATOMIC_HOME: "" })).toBeUndefined();
  expect(readEnv("ATOMIC_HOST_ID", { ATOMIC_HOST_ID: "  box-1 " })).toBe("box-1");
  expect(readEnv("ATOMIC_VERBOSE", { ATOMIC_VERBOSE: "1" })).toBe(true);
  expect(readEnv("ATOMIC_VERBOSE", { ATOMIC_VERBOSE: "yes" })).toBe(false);
  process.env.ATOMIC_MODEL = "m-1";
  expect(readEnv("ATOMIC_MODEL")).toBe("m-1");
});

test("setEnv and takeEnv change this process's environment; childEnv copies it with changes and leaves this one alone", () => {
  setEnv("ATOMIC_DRIVEN_BY", "service");
  process.env.SOME_USER_VARIABLE = "passes";
  process.env.ATOMIC_FAULT_POINTS = "x:1";
  const env = childEnv({ ATOMIC_HOME: "/h", ATOMIC_DRIVEN_BY: undefined }, (k) => k === "ATOMIC_FAULT_POINTS");
  expect(env).toMatchObject({ ATOMIC_HOME: "/h", SOME_USER_VARIABLE: "passes" });
  expect("ATOMIC_DRIVEN_BY" in env).toBe(false);
  expect("ATOMIC_FAULT_POINTS" in env).toBe(false);
  expect(process.env.ATOMIC_DRIVEN_BY).toBe("service");
  expect(takeEnv("ATOMIC_DRIVEN_BY")).toBe("service");
  expect(process.env.ATOMIC_DRIVEN_BY).toBeUndefined();
  expect(takeEnv("ATOMIC_DRIVEN_BY")).toBeUndefined();
  setEnv("ATOMIC_HOST_ID", undefined);
  expect("ATOMIC_HOST_ID" in process.env).toBe(false);
});

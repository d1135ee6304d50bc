/**
 * shared/config/: the config files are read in order (home, project,
 * ATOMIC_CONFIG's), merged key by key, overridden by three variables, and
 * a bad file is one sentence naming the file and the key, with a hint.
 * Real files in a temporary home and project.
 */

import { afterEach, expect, test } from "bun:test";
import { Glob } from "bun";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { CONFIG_REFERENCE_HINT, loadConfig } from "../../src/shared/config/load.ts";
import { CONFIG_DEFAULTS, describeConfig } from "../../src/shared/config/schema.ts";
import { UsageError } from "../../src/shared/errors.ts";

afterEach(removeTempDirs);

function place(config: unknown): { home: string; cwd: string; file: string } {
  const root = makeTempDir("atomic-config-");
  const home = join(root, "home");
  const cwd = join(root, "project");
  mkdirSync(home);
  mkdirSync(join(cwd, ".atomic"), { recursive: true });
  const file = join(home, "config.json");
  writeFileSync(file, typeof config === "string" ? config : JSON.stringify(config));
  return { home, cwd, file };
}

/** The message and hint loadConfig throws for `config` in the home's file. */
function refusal(config: unknown): { code: string; message: string; hint: string | undefined; file: string } {
  const { home, cwd, file } = place(config);
  try {
    loadConfig({ home, cwd, env: {} });
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    const e = err as UsageError;
    return { code: e.code, message: e.message, hint: e.hint, file };
  }
  throw new Error(`accepted: ${JSON.stringify(config)}`);
}

test("a file that is not JSON, or not an object, is refused naming the file", () => {
  const notJson = refusal("{ runner: openai }");
  expect(notJson.code).toBe("bad_config");
  expect(notJson.message).toStartWith(`the config file ${notJson.file} is not valid JSON (`);
  expect(notJson.hint).toBe("fix the file or move it away");
  for (const value of [[1, 2], "\"openai\"", 3]) {
    const r = refusal(typeof value === "string" ? value : JSON.stringify(value));
    expect([r.message, r.hint]).toEqual([`the config file ${r.file} must hold a JSON object`, 'write it as {"runner": "openai", ...}']);
  }
});

test("a key of the wrong type is named by its dotted path, with what it must be and where to read more", () => {
  const cases: [unknown, string, string][] = [
    [{ runner: 5 }, "runner", "a string"],
    [{ openai: [] }, "openai", "an object"],
    [{ openai: { maxRetries: "4" } }, "openai.maxRetries", "a number, at least 0"],
    [{ openai: { requestTimeoutMs: -1 } }, "openai.requestTimeoutMs", "a number, at least 0"],
    [{ runners: { claude: "claude" } }, "runners.claude", "an object"],
    [{ runners: { claude: { args: ["--x", 3] } } }, "runners.claude.args", "an array of strings"],
    [{ pricing: { "gpt-4o": { inputPerMTok: "cheap" } } }, "pricing.gpt-4o.inputPerMTok", "a number, at least 0"],
    [{ admission: { slotsDir: 1 } }, "admission.slotsDir", "a string"],
    [{ budget: { warnAtPercent: null } }, "budget.warnAtPercent", "a number, at least 0"],
    [{ retention: { olderThan: "soon" } }, "retention.olderThan", "an age like 90m, 12h, 30d or 2w"],
    [{ retention: { olderThan: "30d", status: ["running"] } }, "retention.status", "an array of completed, cancelled, failed, skipped"],
    [{ service: { workflowDirs: "/srv" } }, "service.workflowDirs", "an array of directory paths"],
    [{ service: { workflowDirs: [""] } }, "service.workflowDirs", "an array of directory paths"],
  ];
  for (const [config, key, want] of cases) {
    const r = refusal(config);
    expect([r.code, r.message, r.hint]).toEqual(["bad_config", `"${key}" in ${r.file} must be ${want}`, CONFIG_REFERENCE_HINT]);
  }
});

test("a section with a hint of its own gives it", () => {
  const dir = refusal({ artifacts: { dir: "relative/dir" } });
  expect([dir.message, dir.hint]).toEqual([`"artifacts.dir" in ${dir.file} must be an absolute path (a directory every host mounts)`, 'see "artifacts" in docs/reference/config.md']);
  const cap = refusal({ artifacts: { maxFileBytes: 1000 } });
  expect(cap.message).toBe(`"artifacts.maxFileBytes" in ${cap.file} must be a whole number of bytes, at least 262144`);
});

test("home, project and ATOMIC_CONFIG's file merge key by key (sections one level deep); three variables override; unknown keys are ignored", () => {
  const { home, cwd } = place({ runner: "claude", model: "home-model", openai: { maxRetries: 2, baseUrl: "http://home" }, runners: { claude: { path: "/home/claude" } }, newerKey: { x: 1 } });
  writeFileSync(join(cwd, ".atomic", "config.json"), JSON.stringify({ model: "project-model", openai: { maxRetries: 7 }, runners: { pi: { args: ["-q"] } } }));
  const extra = join(cwd, "ci.json");
  writeFileSync(extra, JSON.stringify({ budget: { maxCostUsd: 3 } }));
  const { config, files } = loadConfig({ home, cwd, env: { ATOMIC_CONFIG: extra } });
  expect(files).toEqual([join(home, "config.json"), join(cwd, ".atomic", "config.json"), extra]);
  expect(config).toEqual({ runner: "claude", model: "project-model", openai: { maxRetries: 7, baseUrl: "http://home" }, runners: { claude: { path: "/home/claude" }, pi: { args: ["-q"] } }, budget: { maxCostUsd: 3 } });
  const env = { ATOMIC_RUNNER: "pi", ATOMIC_MODEL: "env-model", ATOMIC_OPENAI_BASE_URL: "http://env" };
  expect(loadConfig({ home, cwd, env }).config).toMatchObject({ runner: "pi", model: "env-model", openai: { maxRetries: 7, baseUrl: "http://env" } });
});

test("ATOMIC_CONFIG naming a missing file is refused; no file at all is an empty configuration", () => {
  const root = makeTempDir("atomic-config-");
  expect(loadConfig({ home: root, cwd: root, env: {} })).toEqual({ config: {}, files: [] });
  expect(() => loadConfig({ home: root, cwd: root, env: { ATOMIC_CONFIG: join(root, "nope.json") } })).toThrow(`ATOMIC_CONFIG names ${join(root, "nope.json")}, which does not exist`);
});

test("no file under src/ but the loader opens a config file or checks one against the schema", () => {
  const transpiler = new Bun.Transpiler({ loader: "ts", trimUnusedImports: false });
  const readers: string[] = [];
  for (const file of new Glob("src/**/*.ts").scanSync(ROOT)) {
    if (file === "src/shared/config/load.ts" || file === "src/shared/config/schema.ts") continue;
    const code = transpiler.transformSync(readFileSync(join(ROOT, file), "utf8"));
    if (/["'`]config\.json["'`]|\bConfigSchema\b|\breadConfigFile\b/.test(code)) readers.push(file);
  }
  expect(readers).toEqual([]);
});

test("every key is described with a type, and the defaults code uses are the ones the schema documents", () => {
  const keys = describeConfig();
  const byPath = new Map(keys.map((k) => [k.path, k]));
  for (const k of keys) expect(k.description.length).toBeGreaterThan(5);
  expect(byPath.get("openai.maxRetries")).toMatchObject({ type: "a number, at least 0", unit: "retries", default: String(CONFIG_DEFAULTS.openai.maxRetries) });
  expect(byPath.get("admission.paceMs")).toMatchObject({ unit: "milliseconds", default: String(CONFIG_DEFAULTS.admission.paceMs) });
  expect(byPath.get("artifacts.maxFileBytes")).toMatchObject({ unit: "bytes", default: String(64 * 1024 * 1024) });
  expect(byPath.has("runners.<name>.path")).toBe(true);
  expect(byPath.has("pricing.<name>.cacheWritePerMTok")).toBe(true);
  expect(byPath.has("service.workflowDirs")).toBe(true);
});

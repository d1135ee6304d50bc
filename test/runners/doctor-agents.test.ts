/**
 * `atomic doctor` with the real agent CLIs (test/agents) on PATH, through
 * the binary: each one found, with its path and version, whether that is
 * the version atomic was tested with, and what it needs (the credential
 * variables, set or not, and its settings file, found or absent); a CLI of
 * another version is reported as untested; one that does not answer
 * --version has the version its install names.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { AGENT_STEP_LIMIT_MS, AGENT_TEST_LIMIT_MS, agentBin, agentTest } from "../helpers/agents.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle } from "../e2e/support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

interface Report {
  runner: string;
  usable: boolean;
  detail: string;
  version?: string;
  testedVersion?: string;
  tested?: boolean;
  needs?: { keys: string[]; keysSet: string[]; settings: string; settingsFound: boolean };
}

agentTest(
  "doctor: every real CLI found on PATH with its version, tested or not, and what it needs",
  async () => {
    const home = makeTempDir("atomic-doctor-home-");
    const user = makeTempDir("atomic-doctor-user-");
    const bins = dirname(agentBin("opencode"));
    writeFileSync(join(user, "opencode.json"), "{}");
    mkdirSync(join(user, "pi"));
    const env = { PATH: `${bins}:/usr/bin:/bin`, HOME: user, OPENCODE_CONFIG: join(user, "opencode.json"), PI_CODING_AGENT_DIR: join(user, "pi"), OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "sk-test", GEMINI_API_KEY: "" };
    const r = await runAtomic(["doctor", "--json"], { home, env, timeoutMs: AGENT_STEP_LIMIT_MS });
    const runners = JSON.parse(r.stdout).runners as Report[];
    const by = (name: string) => runners.find((x) => x.runner === name)!;
    for (const [name, version] of [["claude", "2.1.197"], ["codex", "0.171.0"], ["gemini", "0.61.0"], ["opencode", "1.18.33"], ["pi", "0.73.1"]] as const) {
      expect(by(name)).toMatchObject({ usable: true, version, testedVersion: version, tested: true });
      expect(by(name).detail).toStartWith(join(bins, name));
    }
    expect(by("opencode").needs).toMatchObject({ settings: join(user, "opencode.json"), settingsFound: true });
    expect(by("opencode").needs!.keysSet).toEqual(["ANTHROPIC_API_KEY"]);
    expect(by("pi").needs).toMatchObject({ settings: join(user, "pi", "models.json"), settingsFound: false });
    expect(by("gemini").needs).toMatchObject({ keysSet: [] });

    // Another version of opencode (named in config.json): usable, reported as untested.
    const other = join(user, "opencode-next");
    writeFileSync(other, "#!/bin/sh\necho 1.19.0\n");
    chmodSync(other, 0o755);
    // A pi that does not answer --version (as a node CLI on a busy host may not within doctor's 15 s): its version
    // is the one its install names.
    const pkg = join(user, "lib", "node_modules", "@mariozechner", "pi-coding-agent");
    mkdirSync(join(pkg, "dist"), { recursive: true });
    writeFileSync(join(pkg, "package.json"), JSON.stringify({ name: "@mariozechner/pi-coding-agent", version: "0.73.1" }));
    writeFileSync(join(pkg, "dist", "cli.js"), "#!/bin/sh\nexit 1\n");
    chmodSync(join(pkg, "dist", "cli.js"), 0o755);
    writeFileSync(join(home, "config.json"), JSON.stringify({ runners: { opencode: { path: other }, pi: { path: join(pkg, "dist", "cli.js") } } }));
    const text = await runAtomic(["doctor"], { home, env, timeoutMs: AGENT_STEP_LIMIT_MS });
    expect(text.stdout).toMatch(/ok\s+opencode\s+\S*opencode-next \(1\.19\.0\)/);
    expect(text.stdout).toContain("version 1.19.0: untested (atomic was tested with 1.18.33)");
    expect(text.stdout).toContain(`settings ${join(user, "opencode.json")} (found)`);
    expect(text.stdout).toMatch(/version 0\.73\.1: the tested version/);
    expect(text.stdout).toContain("--version gave no answer within 15 s or failed; its install says 0.73.1");
  },
  AGENT_TEST_LIMIT_MS,
);

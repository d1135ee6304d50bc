/**
 * The two real agent CLIs that speak OpenAI Chat Completions (opencode and
 * pi), isolated per test and pointed at a fake provider (fake-openai.ts),
 * as docs/design/runners.md "Pointing each at a local endpoint" says: their own HOME and
 * XDG directories, opencode's config through OPENCODE_CONFIG with model and
 * update fetches off and its npm plugin install kept offline, pi's models.json under PI_CODING_AGENT_DIR with
 * PI_OFFLINE=1. The model is `fake/m` for both, priced (USD per million
 * tokens) so their own cost can be checked: input 1, output 2, cache read
 * 0.5, cache write 1.5.
 *
 * What opencode (1.18.33) does when it starts in such a fresh home, measured
 * on this project's 2-core machine (strace -f of execve, connect and file
 * creation; the trap below; CPU time of whole starts, first vs. later ones
 * in one home and in fresh homes): nothing a warm machine would have cached
 * and a fresh one must fetch. It connects to nothing but the fake provider
 * and runs no other program; it creates its SQLite database (migrations
 * take about 0.2 s, first start only), log and lock files in the home; it
 * tries to install its plugin SDK into $XDG_CONFIG_HOME/opencode (kept
 * offline below: it fails at once, without a connection, on every start);
 * and it unpacks a 5.5 MB native library into TMPDIR on every start (atomic
 * gives each test home a TMPDIR of its own, removed with it). A start costs
 * 10-15 CPU-seconds whether it is the first in its home or not (1st 14.6,
 * 2nd 10.6, 3rd 14.6 in one home; 10.2-14.5 in fresh homes, with or without
 * the plugin SDK looking installed, and with OPENCODE_PURE, _DISABLE_FFF,
 * _EXPERIMENTAL_DISABLE_FILEWATCHER or _DISABLE_EXTERNAL_SKILLS), against
 * 2-3 for pi and 2 for `opencode --version`, and about 500 MB of memory.
 * About 4 of those CPU-seconds (and 200 MB) went to reading its built-in
 * snapshot of the models.dev catalogue (every provider's models), which the
 * fake provider, defined whole in its config, does not need: OPENCODE_MODELS_PATH
 * points it at an empty catalogue instead (5.8 against 9.6 CPU-seconds a
 * start, measured with /usr/bin/time; the stage's answer, usage and cost
 * come from the config as before).
 * What is left of a start (session 11, measured with getrusage over fresh
 * homes, interleaved, load 3-5): 4.8 CPU-seconds a start, against 1.4 for
 * `opencode --version` (loading its 185 MB executable's bundle). Its
 * plugin SDK install was about 0.4-0.8 of it: before looking at npm,
 * opencode imports its bundled npm (Arborist) unless the config directory
 * already holds `node_modules` and a `package-lock.json` naming
 * `@opencode-ai/plugin`, which is what a machine that once had network has
 * after its first start. The homes here are made that way (a lock that
 * names the SDK, no SDK: nothing imports it unless a plugin is
 * configured): 4.3 against 4.8 CPU-seconds a start. A warm data directory
 * (its SQLite database migrated, copied from a template) took about 0.3
 * more off, but making the template costs a start of its own per test
 * process and a home would no longer show a first start: not done.
 * Session 14 (perf, per thread, and interleaved fresh-home starts): a
 * fifth of a start is JavaScriptCore's JIT threads, half of that its top
 * tier (FTL); with it off (BUN_JSC_useFTLJIT) a start costs 3.7-3.8 against
 * 4.2-4.3 CPU-seconds. It is a test home's setting, not atomic's: the
 * variable would reach every Bun program a user's opencode stage runs.
 * The suite's fresh-machine timeouts came from starting all of a file's
 * CLIs at once on 2 cores (load 15), not from a first start: their tests
 * are now heavy (heavy.ts, at most one per core) and wait on events within
 * the limits of agents.ts.
 */

import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { AGENTS_DIR, agentBin, withAgentNode } from "./agents.ts";
import { makeTempDir } from "./temp.ts";

export type ChatAgent = "opencode" | "pi";
export const MODEL = "fake/m";

export interface ChatAgentSetup {
  /** ATOMIC_HOME, with config.json naming the real CLI's binary. */
  home: string;
  cwd: string;
  /** atomic's environment: the CLI's isolation and its endpoint. */
  env: Record<string, string>;
}

/**
 * A trap for every connection but the fake's: the CLIs get HTTP(S)_PROXY
 * pointing at a listener that accepts nothing and records each connection
 * (`strays`), with NO_PROXY for 127.0.0.1, so anything they try to reach
 * besides the fake provider (telemetry, update checks, model lists,
 * package registries) is seen.
 */
export function startNetworkTrap(): { env: Record<string, string>; strays: string[]; stop(): void } {
  const strays: string[] = [];
  const trap = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      data(_socket, data) {
        strays.push(data.toString("utf8").split("\r\n")[0]!.slice(0, 200));
      },
      open() {},
    },
  });
  const proxy = `http://127.0.0.1:${trap.port}`;
  return {
    env: { HTTPS_PROXY: proxy, HTTP_PROXY: proxy, https_proxy: proxy, http_proxy: proxy, NO_PROXY: "127.0.0.1,localhost", no_proxy: "127.0.0.1,localhost" },
    strays,
    stop: () => trap.stop(true),
  };
}

/** `unpriced`: the CLI's config gives the model no price (it then reports a cost of 0); `pricing`: atomic's own price table (config.json). */
export function chatAgentSetup(kind: ChatAgent, baseUrl: string, opts: { unpriced?: boolean; pricing?: Record<string, unknown>; trap?: { env: Record<string, string> } } = {}): ChatAgentSetup {
  const home = makeTempDir(`atomic-${kind}-home-`);
  const cwd = makeTempDir(`atomic-${kind}-cwd-`);
  const user = makeTempDir(`atomic-${kind}-user-`);
  const xdg = { XDG_CONFIG_HOME: join(user, ".config"), XDG_DATA_HOME: join(user, ".local/share"), XDG_CACHE_HOME: join(user, ".cache"), XDG_STATE_HOME: join(user, ".local/state") };
  for (const d of Object.values(xdg)) mkdirSync(d, { recursive: true });
  writeFileSync(join(home, "config.json"), JSON.stringify({ runners: { [kind]: { path: agentBin(kind) } }, ...(opts.pricing ? { pricing: opts.pricing } : {}) }));
  const env: Record<string, string> = { HOME: user, ...xdg, OPENAI_API_KEY: "", OPENCODE_CONFIG_CONTENT: "", ...opts.trap?.env, ...(kind === "pi" ? { PATH: withAgentNode(process.env.PATH ?? "") } : {}) };
  if (kind === "opencode") {
    const config = join(user, "opencode.json");
    const catalogue = join(user, "models.json");
    writeFileSync(catalogue, "{}");
    writeFileSync(
      config,
      JSON.stringify({
        model: MODEL,
        autoupdate: false,
        share: "disabled",
        provider: {
          fake: {
            npm: "@ai-sdk/openai-compatible",
            options: { baseURL: baseUrl, apiKey: "sk-fake" },
            models: { m: { name: "m", ...(opts.unpriced ? {} : { cost: { input: 1, output: 2, cache_read: 0.5, cache_write: 1.5 } }), limit: { context: 100_000, output: 4_000 } } },
          },
        },
      }),
    );
    // Its plugin SDK as a machine that once had network has it: named in the config directory's lock (above).
    const configDir = join(xdg.XDG_CONFIG_HOME, "opencode");
    mkdirSync(join(configDir, "node_modules"), { recursive: true });
    // The version its own install pins: the installed opencode's.
    const version: string = JSON.parse(readFileSync(join(AGENTS_DIR, "node_modules", "opencode-ai", "package.json"), "utf8")).version;
    const sdk = { dependencies: { "@opencode-ai/plugin": version } };
    writeFileSync(join(configDir, "package.json"), JSON.stringify(sdk));
    writeFileSync(join(configDir, "package-lock.json"), JSON.stringify({ lockfileVersion: 3, requires: true, packages: { "": sdk } }));
    Object.assign(env, {
      OPENCODE_CONFIG: config,
      OPENCODE_DISABLE_MODELS_FETCH: "1",
      OPENCODE_DISABLE_AUTOUPDATE: "1",
      OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
      OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
      // An empty models.dev catalogue instead of its built-in snapshot (about 4 CPU-seconds a start, above).
      OPENCODE_MODELS_PATH: catalogue,
      // JavaScriptCore's top tier (FTL) off: its compiles were half of a start's JIT threads, for code a test's
      // few-second run leaves before it pays (about 0.5 CPU-seconds a start, docs/design/testing.md "Session 14:
      // opencode's top JIT tier"). dist/atomic, a Bun program too, runs so in these tests as well.
      BUN_JSC_useFTLJIT: "0",
      // Should opencode still try to install its plugin SDK (@opencode-ai/plugin, ~67 MB with its dependencies)
      // from the npm registry into its config directory (a newer opencode checking more than the lock above):
      // kept offline (it runs without it), and without retries.
      npm_config_offline: "true",
      npm_config_registry: "http://127.0.0.1:9/",
      npm_config_fetch_retries: "0",
    });
  } else {
    const dir = join(user, "pi");
    mkdirSync(dir);
    writeFileSync(
      join(dir, "models.json"),
      JSON.stringify({
        providers: {
          fake: {
            baseUrl,
            api: "openai-completions",
            apiKey: "sk-fake",
            compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
            models: [{ id: "m", ...(opts.unpriced ? {} : { cost: { input: 1, output: 2, cacheRead: 0.5, cacheWrite: 1.5 } }) }],
          },
        },
      }),
    );
    // pi's own retry, shortened (it waits 2 s, 4 s, 8 s by default).
    writeFileSync(join(dir, "settings.json"), JSON.stringify({ retry: { enabled: true, maxRetries: 2, baseDelayMs: 200 } }));
    Object.assign(env, { PI_CODING_AGENT_DIR: dir, PI_OFFLINE: "1" });
  }
  return { home, cwd, env };
}

/**
 * Sessions continued and forked across worker hosts (`atomic worker`, the
 * real binary, a shared Postgres journal, a root without workers of its
 * own): host "ha" serves queue a, host "hb" queue b, and every stage of
 * the workflow continues (or forks) one that ran on the other host
 * (fixtures/sessions-across.ts). With the openai runner against the fake
 * OpenAI-compatible server, with the real pi and opencode CLIs (test/agents) against
 * the fake Chat Completions provider, with the real gemini CLI (-r; it
 * cannot fork) against the fake Gemini API, and with the real claude
 * (--resume, --fork-session) and codex (exec resume, exec fork) against
 * their fake Anthropic and Responses APIs: each continued call carries the
 * conversation it continues, and the run records each call once: `show`,
 * `runs` and `usage` give what the fake billed, to the token and the
 * micro-dollar (docs/design/budgets.md, Exact usage).
 *
 * Each host runs in a mount namespace without the other's home, where a
 * stage's session files are (openai's conversation.json, pi's session file,
 * session-usage.json): they reach the other host through the artifact
 * store (src/artifacts/session-files.ts), as between separate machines.
 * claude and codex resume by session id from their own store in the
 * user's home: each host has a user home of its own here (HOME, and
 * CODEX_HOME), the other's hidden, so the CLI's session file reaches the
 * other host only as the copy its attempt left (cli-session.jsonl,
 * src/runners/cli-agents/cli-session-copy.ts).
 * gemini (-r) likewise: each host has a home of its own, and the chats
 * file travels as cli-session.jsonl (gemini-sessions.ts).
 * opencode (-s, --fork) resumes by session id from its own database in the
 * user's data directory: each host has its own here, and the session
 * travels as `opencode export`'s output, imported where it is missing
 * (opencode-sessions.ts).
 *
 * Failed attempts (fixtures/sessions-retry.ts), with gemini and opencode:
 * one host alone serves the queue while a stage fails for good (its
 * result returned) and while the first attempt of a continuation fails,
 * the fake answering both with an HTTP 400; the stage is paused before
 * that attempt ends, so its retry waits while that host goes away whole
 * (SIGKILL) and another comes up; then the retry continues the earlier
 * stage's session on the other host, a stage continuing the failed one
 * there carries what it was told (opencode: the failed attempt's export;
 * without it, "Session not found"), and a stage continuing the retry on
 * the host that ran it needs no import (opencode-sessions.ts).
 */

import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { agentTest } from "../helpers/agents.ts";
import { claudeHome, codexHome, geminiHome, type AgentHome } from "../helpers/agent-homes.ts";
import { startFakeAnthropic, text as claudeText } from "../helpers/fake-anthropic.ts";
import { say as codexSay, startFakeResponses } from "../helpers/fake-responses.ts";
import { httpError, say, startFakeGemini } from "../helpers/fake-gemini.ts";
import { chatAgentSetup, MODEL, startNetworkTrap } from "../helpers/chat-agents.ts";
import { startFakeOpenAI, text, type FakeOpenAI, type RecordedRequest } from "../helpers/fake-openai.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { whenIdle } from "../helpers/concurrent.ts";
import { expectRunUsage, type Ledger } from "../helpers/usage-sums.ts";
import { cleanUpHosts, FIXTURES, startHost, stopTheseHosts, type TestHost } from "./support.ts";

const WORKFLOW = join(FIXTURES, "sessions-across.ts");
const RETRY = join(FIXTURES, "sessions-retry.ts");
const STAGES = ["first", "forked", "second", "third"];
const PROMPTS: Record<string, string> = {
  "Remember the number 42.": "noted: 42",
  "Forget it; say bye.": "bye",
  "Which number did I give you?": "you gave 42",
  "And once more?": "still 42",
};
/** What every call of the fake answers, and one call in atomic's ledger (openai: the fake's cost; pi: its price table, 1 in, 2 out, 0.5 cache read). */
const CALL = { prompt: 117, cached: 100, completion: 7, cost: 0.000081 };
const LEDGER: Record<"openai" | "pi" | "opencode" | "gemini" | "claude" | "codex", Ledger> = {
  openai: { inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 0, outputTokens: 7, costMicroUsd: 81 },
  pi: { inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 0, outputTokens: 7, costMicroUsd: 17 + 50 + 14 },
  // opencode: the same price table as pi (chat-agents.ts)
  opencode: { inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 0, outputTokens: 7, costMicroUsd: 17 + 50 + 14 },
  // gemini: the config's prices (agent-homes.ts PRICES)
  gemini: { inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 0, outputTokens: 7, costMicroUsd: 17 + 25 + 28 },
  // claude: its own table for claude-opus-4-8 ($5, $0.5, $6.25 and $25 per million), 11 in, 100 read, 40 written, 7 out
  claude: { inputTokens: 11, cacheReadTokens: 100, cacheWriteTokens: 40, outputTokens: 7, costMicroUsd: 55 + 50 + 250 + 175 },
  // codex: 157 in of which 100 cached and 40 written, priced from the config (agent-homes.ts PRICES, model m)
  codex: { inputTokens: 17, cacheReadTokens: 100, cacheWriteTokens: 40, outputTokens: 7, costMicroUsd: 34 + 50 + 120 + 70 },
};
/** The answers in the order the stages run (first, forked, second, third): claude's and codex's fakes answer in turn. */
const IN_TURN = ["noted: 42", "bye", "you gave 42", "still 42"];

const trap = startNetworkTrap();
beforeAll(async () => {
  await testPostgres();
});
// The real-CLI tests run side by side (heavy slots): cleaned up once none runs; each test stops its own hosts once
// its run is checked (an idle host polls the journal every second).
afterEach(whenIdle(cleanUpHosts));
afterAll(() => {
  trap.stop();
  removeTempDirs();
});

const partsText = (content: unknown) => (typeof content === "string" ? content : ((content as { text?: string }[] | null) ?? []).map((p) => p.text ?? "").join(""));
const lastAsk = (req: RecordedRequest) => partsText(req.body.messages.filter((m) => m.role === "user").at(-1)?.content).trim();

function fakeFor(): Promise<FakeOpenAI> {
  // Answers each stage's prompt; a call that is no stage's work (a CLI's own, if it made one) costs nothing.
  return startFakeOpenAI((req) => (PROMPTS[lastAsk(req)] ? text(PROMPTS[lastAsk(req)]!, CALL) : text("A title", { prompt: 0, completion: 0 })));
}

type HostId = "ha" | "hb";
/** Per host, the user's home it runs its CLIs with (`env` over the test's) and the directories only it has. */
type UserHomes = Record<HostId, { env: Record<string, string>; dirs: string[] }>;

/**
 * Runs the workflow with its stages on hosts ha and hb; checks where each ran, its answers and the run's usage.
 * `users`: each host's own user home (claude, codex): each host also lacks the other's.
 */
async function runAcross(kind: keyof typeof LEDGER, s: { home: string; cwd: string; env: Record<string, string> }, model: string, fork: boolean, users?: UserHomes): Promise<void> {
  const url = await freshDatabase(`fsess${kind}`);
  const homes = { ha: makeTempDir("atomic-host-ha-"), hb: makeTempDir("atomic-host-hb-") };
  const ids = { ha: `${kind}-ha`, hb: `${kind}-hb` };
  const started: TestHost[] = [];
  try {
    for (const [id, queue, other] of [["ha", "a", "hb"], ["hb", "b", "ha"]] as const) {
      copyFileSync(join(s.home, "config.json"), join(homes[id], "config.json"));
      // Each host without the other's home (where a stage's session files are written): the session travels through the artifact store.
      started.push(await startHost({ url, id: ids[id], slots: 1, queues: [queue], workdir: s.cwd, home: homes[id], env: { ...s.env, ...users?.[id].env }, hide: [homes[other], ...(users?.[other].dirs ?? [])] }));
    }
    await runOnHosts(kind, s, url, model, fork, ids);
  } finally {
    await stopTheseHosts(started);
  }
}

/** The run of runAcross, its hosts (`ids`) up. */
async function runOnHosts(kind: keyof typeof LEDGER, s: { home: string; cwd: string; env: Record<string, string> }, url: string, model: string, fork: boolean, ids: Record<HostId, string>): Promise<void> {
  const args = ["run", WORKFLOW, "--journal", url, "--workers", "0", "--json", "--input", `runner=${kind}`, "--input", `model=${model}`, "--input", `fork=${fork}`];
  const r = await runAtomic(args, { home: s.home, cwd: s.cwd, env: s.env, timeoutMs: 600_000 });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const end = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { runId: string; outputs: { texts: (string | null)[] } };
  expect(end.outputs.texts).toEqual(["noted: 42", "you gave 42", fork ? "bye" : null, "still 42"]);
  const env = { ...s.env, ATOMIC_JOURNAL: url };
  // Each continuation ran on the other host than the stage it continues.
  const shown = JSON.parse((await runAtomic(["show", end.runId, "--json"], { home: s.home, env })).stdout) as { steps: { name: string; ranOn?: { host: string } }[] };
  expect(Object.fromEntries(shown.steps.map((x) => [x.name, x.ranOn?.host]))).toEqual({ first: ids.ha, ...(fork ? { forked: ids.hb } : {}), second: ids.hb, third: ids.ha });
  // Each call recorded once: every view gives what the fake billed.
  await expectRunUsage(s.home, end.runId, fork ? STAGES : STAGES.filter((n) => n !== "forked"), LEDGER[kind], env);
}

/** The openai runner, pi or opencode, against the fake Chat Completions server: also what each call carried. */
async function acrossHosts(kind: "openai" | "pi" | "opencode", server: FakeOpenAI, s: { home: string; cwd: string; env: Record<string, string> }, users?: UserHomes) {
  await runAcross(kind, s, kind === "openai" ? "fake-model" : MODEL, true, users);
  // Each call carried the conversation it continues.
  const calls = server.requests.filter((q) => Object.hasOwn(PROMPTS, lastAsk(q)));
  expect(calls.map(lastAsk)).toEqual(Object.keys(PROMPTS));
  const said = (q: RecordedRequest) => JSON.stringify(q.body.messages);
  expect(said(calls[1]!)).toContain("noted: 42");
  expect(said(calls[2]!)).toContain("noted: 42");
  expect(said(calls[2]!)).not.toContain("bye");
  expect(said(calls[3]!)).toContain("you gave 42");
}

test("openai: a conversation continued and forked across hosts carries its messages and records each call once", async () => {
  const server = await fakeFor();
  try {
    const home = makeTempDir("atomic-fleet-sessions-");
    const cwd = makeTempDir("atomic-fleet-sessions-cwd-");
    const config = join(home, "config.json");
    await Bun.write(config, "{}");
    await acrossHosts("openai", server, { home, cwd, env: { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" } });
    expect(server.billed.costMicroUsd).toBe(4 * 81);
  } finally {
    await server.close();
  }
}, 120_000);

test("openai: a conversation continued and forked between the root's own workers and a host of another machine records each call once", async () => {
  const server = await fakeFor();
  try {
    const home = makeTempDir("atomic-fleet-sessions-");
    const cwd = makeTempDir("atomic-fleet-sessions-cwd-");
    await Bun.write(join(home, "config.json"), "{}");
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const url = await freshDatabase("fsessroot");
    // The only host serves queue b, without the root's home (where the root's own workers write their stages' files).
    await startHost({ url, id: "hb", slots: 1, queues: ["b"], workdir: cwd, env, hide: [home] });
    // first and third on the root's own worker (the default queue), forked and second on the host.
    const args = ["run", WORKFLOW, "--journal", url, "--workers", "1", "--json", "--input", "runner=openai", "--input", "queueA=default"];
    const r = await runAtomic(args, { home, cwd, env, timeoutMs: 120_000 });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const end = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { runId: string; outputs: { texts: (string | null)[] } };
    expect(end.outputs.texts).toEqual(["noted: 42", "you gave 42", "bye", "still 42"]);
    const shown = JSON.parse((await runAtomic(["show", end.runId, "--json"], { home, env: { ...env, ATOMIC_JOURNAL: url } })).stdout) as { steps: { name: string; ranOn?: { host: string } }[] };
    const on = Object.fromEntries(shown.steps.map((x) => [x.name, x.ranOn?.host]));
    expect({ forked: on.forked, second: on.second }).toEqual({ forked: "hb", second: "hb" });
    expect(on.first).not.toBe("hb"); // the root's machine
    expect(on.third).toBe(on.first);
    const calls = server.requests.filter((q) => Object.hasOwn(PROMPTS, lastAsk(q)));
    expect(calls.map(lastAsk)).toEqual(Object.keys(PROMPTS));
    const said = (q: RecordedRequest) => JSON.stringify(q.body.messages);
    expect(said(calls[1]!)).toContain("noted: 42");
    expect(said(calls[2]!)).toContain("noted: 42");
    expect(said(calls[3]!)).toContain("you gave 42");
    await expectRunUsage(home, end.runId, STAGES, LEDGER.openai, { ...env, ATOMIC_JOURNAL: url });
  } finally {
    await server.close();
  }
}, 120_000);

agentTest("pi: a session continued and forked across hosts (a copy of its session file) records each call once", async () => {
  const server = await fakeFor();
  try {
    await acrossHosts("pi", server, chatAgentSetup("pi", server.url, { trap }));
  } finally {
    await server.close();
  }
  expect(trap.strays).toEqual([]);
});

agentTest("opencode: a session continued (-s) and forked (--fork) across hosts that do not share a home records each call once", async () => {
  const server = await fakeFor();
  try {
    const setup = chatAgentSetup("opencode", server.url, { trap });
    // Each host with a data directory of its own, its HOME's default (~/.local/share: XDG_DATA_HOME, set, is a variable
    // the run records and its stages get everywhere); the config and the empty catalogue stay the test's. The session
    // travels as opencode's export.
    const { XDG_DATA_HOME: shared, ...env } = setup.env;
    const users = ownUserHomes({ dir: makeTempDir("atomic-fleet-users-"), env });
    for (const id of ["ha", "hb"] as const) delete users[id].env.XDG_DATA_HOME;
    await acrossHosts("opencode", server, { ...setup, env }, users);
    for (const id of ["ha", "hb"] as const) expect(existsSync(join(users[id].env.HOME!, ".local", "share", "opencode", "opencode.db"))).toBe(true);
    expect(existsSync(join(shared!, "opencode"))).toBe(false);
  } finally {
    await server.close();
  }
  expect(trap.strays).toEqual([]);
});

/**
 * A user home of its own for each host (HOME and the XDG directories, and for codex a CODEX_HOME with the test
 * home's config.toml), as two machines have: the CLI's own session store is not shared.
 */
function ownUserHomes(h: Pick<AgentHome, "dir" | "env">): UserHomes {
  const users = {} as UserHomes;
  for (const id of ["ha", "hb"] as const) {
    const dir = join(h.dir, `user-${id}`);
    const home = join(dir, "home");
    const env: Record<string, string> = { HOME: home, XDG_CONFIG_HOME: join(home, ".config"), XDG_DATA_HOME: join(home, ".local", "share"), XDG_CACHE_HOME: join(home, ".cache"), XDG_STATE_HOME: join(home, ".local", "state") };
    for (const d of Object.values(env)) mkdirSync(d, { recursive: true });
    // gemini's settings (API-key auth): the user's own on each machine.
    const gemini = join(h.env.HOME!, ".gemini", "settings.json");
    if (existsSync(gemini)) {
      mkdirSync(join(home, ".gemini"));
      copyFileSync(gemini, join(home, ".gemini", "settings.json"));
    }
    if (h.env.CODEX_HOME) {
      env.CODEX_HOME = join(dir, "codex");
      mkdirSync(env.CODEX_HOME);
      copyFileSync(join(h.env.CODEX_HOME, "config.toml"), join(env.CODEX_HOME, "config.toml"));
    }
    users[id] = { env, dirs: [dir] };
  }
  return users;
}

/** The texts of a model call's body, as a string to look into. */
const bodyOf = (c: { body: unknown }) => JSON.stringify(c.body);

/** claude or codex, each host with a user home of its own: the CLI's session file travels too (runners/cli-agents/cli-session-copy.ts). */
async function ownStoreAcross(kind: "claude" | "codex", h: AgentHome, model: string, calls: () => { body: unknown }[]): Promise<void> {
  const cwd = join(h.dir, "work");
  mkdirSync(cwd);
  const users = ownUserHomes(h);
  await runAcross(kind, { home: h.home, cwd, env: h.env }, model, true, users);
  // Each continued call carried the conversation it continues, and the fork left it as it was.
  const said = calls().slice(0, 4).map(bodyOf);
  expect(said[1]).toContain("noted: 42");
  expect(said[2]).toContain("noted: 42");
  expect(said[2]).not.toContain("bye");
  expect(said[3]).toContain("you gave 42");
  // Neither host's CLI wrote into the test's own home: each ran with its own.
  expect(existsSync(join(h.env.HOME!, kind === "claude" ? ".claude" : ".codex"))).toBe(false);
}

agentTest("claude: a session continued (--resume) and forked (--fork-session) across hosts that do not share a home records each call once", async () => {
  const fake = await startFakeAnthropic();
  try {
    fake.push(...IN_TURN.map((answer) => claudeText(answer, { input: 11, cacheRead: 100, cacheWrite: 40, output: 7 })));
    await ownStoreAcross("claude", claudeHome(fake), "claude-opus-4-8", () => fake.calls);
    fake.assertOnlyFake();
  } finally {
    await fake.close();
  }
});

agentTest("codex: a thread continued (exec resume) and forked (exec fork) across hosts that do not share a home records each call once", async () => {
  const fake = await startFakeResponses();
  try {
    fake.push(...IN_TURN.map((answer) => codexSay(answer, { input: 157, cached: 100, cacheWrite: 40, output: 7 })));
    await ownStoreAcross("codex", codexHome(fake), "m", () => fake.calls);
    fake.assertOnlyFake();
  } finally {
    await fake.close();
  }
});

agentTest("gemini: a session resumed across hosts (-r) that do not share a home records each call once", async () => {
  const fake = await startFakeGemini();
  try {
    fake.push(...["noted: 42", "you gave 42", "still 42"].map((answer) => say(answer, { prompt: 117, cached: 100, output: 7 })));
    const h = geminiHome(fake);
    const cwd = join(h.dir, "work");
    mkdirSync(cwd);
    await runAcross("gemini", { home: h.home, cwd, env: h.env }, "gemini-2.5-flash", false, ownUserHomes(h));
    // Each call carried the conversation it resumes.
    const said = fake.calls.slice(0, 3).map((c) => JSON.stringify(c.body));
    expect(said[1]).toContain("noted: 42");
    expect(said[2]).toContain("you gave 42");
    // Neither host's gemini wrote into the test's own home: each ran with its own.
    expect(existsSync(join(h.env.HOME!, ".gemini", "tmp"))).toBe(false);
    fake.assertOnlyFake();
  } finally {
    await fake.close();
  }
});

/** A scripted failure the fake holds until the stage is paused: `release` lets its 400 go. */
function heldFailure() {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  return { gate, release };
}

/**
 * fixtures/sessions-retry.ts across hosts ha and hb (queue b, one at a time; each with its own user home): `doomed`
 * (when asked for) and `second`'s first attempt fail on ha, the fake holding the latter's call (`failing`) until `second` is paused;
 * ha then goes away whole (SIGKILL), hb comes up, `second` is unpaused and retried there, and `third` continues it
 * there. Checks where each ran, the answers and the usage (each call once); what each call carried is the
 * caller's to check. Returns the run's id and the environment that names its journal.
 */
async function retryAcross(kind: "gemini" | "opencode", s: { home: string; cwd: string; env: Record<string, string> }, model: string, users: UserHomes, failing: { held: () => boolean; release: () => void }, doomed: boolean): Promise<{ runId: string; env: Record<string, string> }> {
  const url = await freshDatabase(`fretry${kind}`);
  const homes = { ha: makeTempDir("atomic-host-ha-"), hb: makeTempDir("atomic-host-hb-") };
  const ids = { ha: `${kind}-a`, hb: `${kind}-b` };
  const host = (id: HostId, other: HostId) => {
    copyFileSync(join(s.home, "config.json"), join(homes[id], "config.json"));
    return startHost({ url, id: ids[id], slots: 1, queues: ["b"], workdir: s.cwd, home: homes[id], env: { ...s.env, ...users[id].env }, hide: [homes[other], ...users[other].dirs] });
  };
  const ha = await host("ha", "hb");
  const env = { ...s.env, ATOMIC_JOURNAL: url };
  const run = spawnAtomic(["run", RETRY, "--journal", url, "--workers", "0", "--json", "--input", `runner=${kind}`, "--input", `model=${model}`, "--input", `doomed=${doomed}`], { home: s.home, cwd: s.cwd, env: s.env });
  const out = lineWatcher(run.stdout);
  const stderr = new Response(run.stderr).text();
  const { runId } = JSON.parse(await out.waitFor(/"type":"run_started"/, 60_000)) as { runId: string };
  // second's first attempt made its call: paused before that attempt fails, so its retry waits for the other host.
  await waitUntil(failing.held, 600_000, "the first attempt's call of stage second");
  const paused = await runAtomic(["pause", runId, "second"], { home: s.home, env });
  expect({ code: paused.code, stderr: paused.stderr }).toEqual({ code: 0, stderr: "" });
  failing.release();
  const failed = JSON.parse(await out.waitFor(/"type":"attempt_ended".*"name":"second","attempt":1,/, 300_000)) as { status: string; error?: { code: string } };
  expect(failed).toMatchObject({ status: "failed", error: { code: "provider_bad_request" } });
  ha.kill();
  await ha.exited;
  const hb = await host("hb", "ha");
  const unpaused = await runAtomic(["unpause", runId, "second"], { home: s.home, env });
  expect({ code: unpaused.code, stderr: unpaused.stderr }).toEqual({ code: 0, stderr: "" });
  const end = JSON.parse(await out.waitFor(/"type":"result"/, 600_000)) as { status: string; error?: unknown; outputs: { texts: (string | null)[]; doomed: string | null; sessions: (string | null)[] } };
  // (should it not complete, its stages' logs say what went wrong)
  const logs = end.status === "completed" ? "" : (await runAtomic(["logs", runId], { home: s.home, env })).stdout.split("\n").slice(-60).join("\n");
  expect({ status: end.status, error: end.error, logs }).toEqual({ status: "completed", error: undefined, logs: "" });
  expect({ code: await run.exited, stderr: await stderr }).toEqual({ code: 0, stderr: "" });
  expect(end.outputs.texts).toEqual(["noted: 42", "you gave 42", "still 42", doomed ? "walrus it was" : null]);
  expect(end.outputs.doomed).toBe(doomed ? "failed" : null);
  const [first, second, third, doomedId, after] = end.outputs.sessions;
  expect([second, third]).toEqual([first, first]); // the retry continued first's session, third went on with it
  if (doomed) expect(after).toBe(doomedId); // and the failed stage's session went on
  const shown = JSON.parse((await runAtomic(["show", runId, "--json"], { home: s.home, env })).stdout) as { steps: { name: string; ranOn?: { host: string } }[] };
  expect(Object.fromEntries(shown.steps.map((x) => [x.name, x.ranOn?.host]))).toEqual({ first: ids.ha, second: ids.hb, third: ids.hb, ...(doomed ? { doomed: ids.ha, after: ids.hb } : {}) });
  // Each call recorded once: the failed ones billed nothing.
  await expectRunUsage(s.home, runId, ["first", "second", "third", ...(doomed ? ["after"] : [])], LEDGER[kind], env);
  await stopTheseHosts([ha, hb]);
  return { runId, env };
}

agentTest("opencode: a failed attempt retried on another host continues the session there; a stage continuing a failed one on another host carries its conversation", async () => {
  const failing = heldFailure();
  let held = false;
  const asked = new Map<string, number>();
  const refused = (message: string) => ({ status: 400, body: JSON.stringify({ error: { message } }) });
  const server = await startFakeOpenAI((req) => {
    const ask = lastAsk(req);
    asked.set(ask, (asked.get(ask) ?? 0) + 1);
    if (ask === "The secret word is walrus.") return refused("scripted failure of doomed");
    if (ask === "Which number did I give you?" && asked.get(ask) === 1) {
      held = true;
      return { ...refused("scripted failure of second's first attempt"), hold: failing.gate };
    }
    const answer = { ...PROMPTS, "What was the secret word?": "walrus it was" }[ask];
    return answer ? text(answer, CALL) : text("A title", { prompt: 0, completion: 0 });
  });
  try {
    const setup = chatAgentSetup("opencode", server.url, { trap });
    const { XDG_DATA_HOME: _shared, ...env } = setup.env;
    const users = ownUserHomes({ dir: makeTempDir("atomic-fleet-users-"), env });
    for (const id of ["ha", "hb"] as const) delete users[id].env.XDG_DATA_HOME;
    const ran = await retryAcross("opencode", { ...setup, env }, MODEL, users, { held: () => held, release: failing.release }, true);
    const said = (ask: string) => server.requests.filter((q) => lastAsk(q) === ask).map((q) => JSON.stringify(q.body.messages));
    // The failed attempt on ha and the retry on hb each carried first's conversation.
    expect(said("Which number did I give you?")).toHaveLength(2);
    for (const call of said("Which number did I give you?")) expect(call).toContain("noted: 42");
    // hb had doomed's session only from its failed attempt's export.
    expect(said("What was the secret word?")).toHaveLength(1);
    expect(said("What was the secret word?")[0]).toContain("The secret word is walrus.");
    expect(said("And once more?")).toHaveLength(1);
    expect(said("And once more?")[0]).toContain("you gave 42");
    // Imported where the copy came from another machine's database; third's, exported on hb itself, was not (one opencode start saved).
    const logs = async (stage: string) => (await runAtomic(["logs", ran.runId, "--stage", stage], { home: setup.home, env: ran.env })).stdout;
    expect(await logs("doomed")).toMatch(/session \S+ exported for another machine/); // failed, and exported all the same
    for (const stage of ["second", "after"]) expect(await logs(stage)).toContain("imported from the earlier attempt's copy");
    // second's retry (its log is the latest attempt's) exported its session on hb: the copy third's check reads. Once
    // third's log had neither line: without that copy third says nothing (its session is in hb's database all the same).
    expect(await logs("second")).toMatch(/session \S+ exported for another machine/);
    expect(await logs("third")).toContain("is in this machine's opencode database already (the earlier attempt exported it from there): not imported");
  } finally {
    failing.release();
    await server.close();
  }
  expect(trap.strays).toEqual([]);
});

// gemini 0.61.0 does not resume a session whose only turn failed ("Invalid session identifier", on the machine that
// ran it too): the failed stage is left out, and its retry is what goes to the other host.
agentTest("gemini: a failed attempt retried on another host resumes the session there (-r), and a stage resumes the retry's on that host", async () => {
  const failing = heldFailure();
  const fake = await startFakeGemini();
  try {
    const usage = { prompt: 117, cached: 100, output: 7 };
    fake.push(say("noted: 42", usage), { ...httpError(400, "INVALID_ARGUMENT", "scripted failure of second's first attempt"), hold: failing.gate }, say("you gave 42", usage), say("still 42", usage));
    const h = geminiHome(fake);
    const cwd = join(h.dir, "work");
    mkdirSync(cwd);
    // The second model call is second's first attempt's.
    await retryAcross("gemini", { home: h.home, cwd, env: h.env }, "gemini-2.5-flash", ownUserHomes(h), { held: () => fake.calls.length >= 2, release: failing.release }, false);
    const said = fake.calls.slice(0, 4).map((c) => JSON.stringify(c.body));
    // The failed attempt on one host and the retry on the other each carried first's conversation; third carried second's.
    expect(said[1]).toContain("noted: 42");
    expect(said[2]).toContain("noted: 42");
    expect(said[3]).toContain("you gave 42");
    fake.assertOnlyFake();
  } finally {
    failing.release();
    await fake.close();
  }
});

/**
 * Run tools from stages on a worker host (docs/design/stage-tools.md,
 * "Worker hosts"): the root has no workers (`--workers 0`), so every stage
 * runs on an `atomic worker` with a home of its own. Its agents' calls go
 * to that host's broker, where the host stands in for the root's session,
 * up the journal to the root's driver and back: `message` to a stage not
 * started yet (the fake provider scripting the calls), and `ask_agent`
 * between two group siblings on the host, the reply relayed too. The real
 * gemini CLI on the host (its stage MCP server in a gemini home of the
 * stage's own there): ask_user parks the stage, answered from another
 * home, and the next attempt resumes gemini's session on the host;
 * ask_agent to an openai sibling on the host.
 * The host runs without the root's home (a mount namespace with it
 * hidden; in the gemini tests the user's home, with ~/.gemini, stays as a
 * host of the same user would have it): no call can reach the root's
 * broker socket as it could on one machine, only the journal.
 */

import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { AGENT_TEST_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { geminiHome } from "../helpers/agent-homes.ts";
import { say as geminiSay, startFakeGemini, type FakeGemini, type GeminiReply } from "../helpers/fake-gemini.ts";
import type { LoggedRequest } from "../helpers/fake-provider.ts";
import { startFakeOpenAI, text, type FakeOpenAI, type RecordedRequest, type Reply, type Script } from "../helpers/fake-openai.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { whenIdle } from "../helpers/concurrent.ts";
import { cleanUpHosts, startHost } from "./support.ts";

const FIXTURE = join(import.meta.dir, "..", "runners", "fixtures", "run-tools.ts");
const usage = { prompt: 10, completion: 5 };
type Messages = RecordedRequest["body"]["messages"];
const firstUser = (m: Messages) => String(m.find((x) => x.role === "user")?.content ?? "");
const toolResults = (m: Messages) => m.filter((x) => x.role === "tool").map((x) => String(x.content));

let script: Script = () => text("unset");
let server: FakeOpenAI;
beforeAll(async () => {
  await testPostgres();
  server = await startFakeOpenAI((req, n) => script(req, n));
});
afterAll(async () => {
  await server.close();
});
// The real-CLI tests run side by side (heavy slots): cleaned up once none runs.
afterEach(whenIdle(cleanUpHosts));

const agentEnv = () => ({ OPENAI_API_KEY: "sk-test", ATOMIC_OPENAI_BASE_URL: server.url });

/** The openai answerer of an ask_agent: busy until the question comes (a steer message, delivered down to the host; its first turn held until `asked`), then replies 42 and ends saying where its answer went. */
function answererTurn(m: Messages, asked: Promise<unknown>): Reply {
  const results = toolResults(m);
  if (results.some((t) => t.startsWith("your answer went to"))) return text(`answerer: ${results.at(-1)}`);
  const id = m.map((x) => /Question (a[0-9a-f]+) from stage asker/.exec(String(x.content ?? ""))?.[1]).find(Boolean);
  if (id) return { toolCalls: [{ id: "r1", name: "reply", arguments: { id, text: "42" } }], usage };
  // Bounded, should the question never come.
  if (results.length > 600) return text("no question came");
  return { toolCalls: [{ id: `l${results.length}`, name: "list", arguments: {} }], usage, hold: results.length === 0 ? asked : undefined, paceMs: 100 };
}

async function runOnHost(mode: string) {
  const url = await freshDatabase("tools");
  const dir = makeTempDir("atomic-fleet-tools-");
  // The host does not see the root's home (its broker's socket there): the stages' calls reach the root through the journal only.
  await startHost({ url, id: "far", slots: 2, env: agentEnv(), hide: [dir] });
  const r = await runAtomic(["run", FIXTURE, "--journal", url, "--workers", "0", "--json", "--input", `mode=${mode}`], { home: join(dir, "root"), env: agentEnv() });
  const out = r.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>);
  return { r, ended: out.find((e) => e.type === "run_ended") as { outputs?: Record<string, string> } | undefined };
}

test("a stage on a worker host messages a stage not started yet; the result comes back through the host", async () => {
  script = (req) => {
    const m = req.body.messages;
    const results = toolResults(m);
    if (firstUser(m).startsWith("write")) {
      if (results.length) return text(results.join(" | "));
      return { toolCalls: [{ id: "m1", name: "message", arguments: { to: "reader", text: "the secret is 42" } }], usage };
    }
    return text(`reader saw: ${m.map((x) => String(x.content ?? "")).join(" ")}`);
  };
  const { r, ended } = await runOnHost("message");
  expect(r.code).toBe(0);
  expect(ended!.outputs!.writer).toStartWith("sent to reader (queued until it starts)");
  expect(ended!.outputs!.reader).toContain("the secret is 42");
}, 120_000);

test("ask_agent between two group siblings on a worker host: the question reaches the other, its reply is the asker's result", async () => {
  let askSeen!: () => void;
  const asked = new Promise<void>((resolve) => (askSeen = resolve));
  script = (req) => {
    const m = req.body.messages;
    const results = toolResults(m);
    if (firstUser(m).startsWith("ask")) {
      if (results.length) return text(`asker got: ${results[0]}`);
      askSeen();
      return { toolCalls: [{ id: "q1", name: "ask_agent", arguments: { to: "answerer", question: "what is 6*7?", timeout_s: 120 } }], usage };
    }
    return answererTurn(m, asked);
  };
  const { r, ended } = await runOnHost("group");
  expect(r.code).toBe(0);
  expect(ended!.outputs).toEqual({ asker: "asker got: 42", answerer: "answerer: your answer went to stage asker" });
}, 120_000);

/**
 * gemini on a worker host: the host's workers run the real gemini CLI (the user's ~/.gemini and the runner's
 * config as on the root), each stage with run tools in a gemini home of its own on the host, whose stage MCP
 * server reaches the root through the journal (the host's tools relay): the root's home is hidden from the host.
 */
async function geminiOnHost(fake: FakeGemini, dbPrefix: string) {
  const h = geminiHome(fake);
  const url = await freshDatabase(dbPrefix);
  const hostHome = makeTempDir("atomic-host-gemini-");
  copyFileSync(join(h.home, "config.json"), join(hostHome, "config.json"));
  const env = { ...h.env, ...agentEnv() };
  await startHost({ url, id: "far", slots: 2, home: hostHome, env, hide: [h.home] });
  const elsewhere = { home: makeTempDir("atomic-fleet-elsewhere-"), env: { ...env, ATOMIC_JOURNAL: url } };
  const run = (mode: string) =>
    spawnAtomic(["--json", "run", GEMINI_FIXTURE, "--journal", url, "--workers", "0", "--input", "runner=gemini", "--input", `mode=${mode}`], { home: h.home, env });
  return { h, elsewhere, run };
}

const GEMINI_FIXTURE = join(import.meta.dir, "..", "runners", "fixtures", "cli-run-tools.ts");
const geminiText = (req: LoggedRequest) => JSON.stringify((req.body as { contents?: unknown }).contents);
const endOf = (lines: string[]) => JSON.parse(lines.filter((l) => l.startsWith("{")).at(-1)!) as { type: string; runId: string; outputs?: Record<string, string> };

agentTest("gemini on a worker host asks the person (ask_user, served to it as ask_person): the stage parks with gemini gone, atomic answer from another home, the next attempt on the host resumes gemini's session with the answer", async () => {
  const fake = await startFakeGemini();
  const reply = (req: LoggedRequest): GeminiReply => {
    const said = geminiText(req);
    const answer = /The person answered your question: ([a-z]+)/.exec(said)?.[1];
    if (answer) return geminiSay(`deploying: ${answer}`);
    if (said.includes("waits for a person")) return geminiSay("waiting for the person");
    return { calls: [{ name: "mcp_atomic_ask_person", args: { question: "Deploy to production?", choices: ["yes", "no"] } }] };
  };
  fake.push(...Array.from({ length: 3 }, () => reply));
  try {
    const { elsewhere, run } = await geminiOnHost(fake, "gask");
    const root = run("user");
    const out = lineWatcher(root.stdout);
    const runId = /"runId":"([0-9a-z]+)"/.exec(await out.waitFor(/"runId"/, 60_000))![1]!;
    // Parked: the question is listed where any person looks, the attempt that asked (and gemini) gone.
    await out.waitFor(/Deploy to production\?/, AGENT_TEST_LIMIT_MS);
    expect(fake.calls.length).toBe(2);
    const inbox = JSON.parse((await runAtomic(["--json", "inbox", runId], elsewhere)).stdout) as { prompts: { id: string; question: string; choices: string[]; state: string }[] };
    expect(inbox.prompts.map((p) => [p.question, p.choices, p.state])).toEqual([["Deploy to production?", ["yes", "no"], "open"]]);
    expect((await runAtomic(["answer", runId, inbox.prompts[0]!.id, "yes"], elsewhere)).code).toBe(0);
    expect(await root.exited).toBe(0);
    expect(endOf(out.lines).outputs).toEqual({ asker: "deploying: yes" });
    // Three model calls: nothing before the question redone; the last is the same conversation, the answer in it.
    expect(fake.calls.length).toBe(3);
    const last = geminiText(fake.calls.at(-1)!);
    expect(last).toContain("mcp_atomic_ask_person");
    expect(last).toContain("waits for a person");
    expect(last).toContain("The person answered your question: yes");
    // Every attempt ran on the host.
    const shown = JSON.parse((await runAtomic(["show", runId, "--json"], elsewhere)).stdout) as { steps: { name: string; ranOn?: { host: string } }[] };
    expect(shown.steps.filter((x) => x.name === "asker").map((x) => x.ranOn?.host)).toEqual(["far"]);
    fake.assertOnlyFake();
  } finally {
    await fake.close();
  }
});

agentTest("gemini on a worker host asks an openai sibling of its group on the host (ask_agent); the sibling's reply is gemini's function response", async () => {
  const fake = await startFakeGemini();
  const asked = fake.callMatching();
  script = (req) => answererTurn(req.body.messages, asked);
  fake.push({ calls: [{ name: "mcp_atomic_ask_agent", args: { to: "answerer", question: "what is 6*7?", timeout_s: 300 } }] }, geminiSay("asker done"));
  try {
    const { run } = await geminiOnHost(fake, "gagent");
    const root = run("ask");
    const out = lineWatcher(root.stdout);
    expect(await root.exited).toBe(0);
    expect(endOf(out.lines).outputs).toEqual({ asker: "asker done", answerer: "answerer: your answer went to stage asker" });
    const response = ((fake.calls[1]!.body as { contents: { parts: { functionResponse?: { name: string; response: unknown } }[] }[] }).contents).flatMap((c) => c.parts).find((p) => p.functionResponse)!;
    expect(response.functionResponse!.name).toBe("mcp_atomic_ask_agent");
    expect(JSON.stringify(response.functionResponse!.response)).toContain("42");
    fake.assertOnlyFake();
  } finally {
    await fake.close();
  }
});

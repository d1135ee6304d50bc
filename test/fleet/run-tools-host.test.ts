/**
 * Run tools from stages on a worker host (docs/design/stage-tools.md,
 * "Worker hosts"): the root has no workers (`--workers 0`), so every stage
 * runs on an `atomic worker` with a home of its own. Its agents' calls go
 * to that host's broker, where the host stands in for the root's session,
 * up the journal to the root's driver and back: `message` to a stage not
 * started yet (the fake provider scripting the calls), and `ask_agent`
 * between two group siblings on the host, the reply relayed too.
 */

import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, type FakeOpenAI, type RecordedRequest, type Script } from "../helpers/fake-openai.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
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
afterEach(cleanUpHosts);

const agentEnv = () => ({ OPENAI_API_KEY: "sk-test", ATOMIC_OPENAI_BASE_URL: server.url });

async function runOnHost(mode: string) {
  const url = await freshDatabase("tools");
  const dir = makeTempDir("atomic-fleet-tools-");
  await startHost({ url, id: "far", slots: 2, env: agentEnv() });
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
    if (results.some((t) => t.startsWith("your answer went to"))) return text(`answerer: ${results.at(-1)}`);
    const id = m.map((x) => /Question (a[0-9a-f]+) from stage asker/.exec(String(x.content ?? ""))?.[1]).find(Boolean);
    if (id) return { toolCalls: [{ id: "r1", name: "reply", arguments: { id, text: "42" } }], usage };
    // Busy until the question comes (a steer message, delivered down to the host); bounded, should it never come.
    if (results.length > 600) return text("no question came");
    return { toolCalls: [{ id: `l${results.length}`, name: "list", arguments: {} }], usage, hold: results.length === 0 ? asked : undefined, paceMs: 100 };
  };
  const { r, ended } = await runOnHost("group");
  expect(r.code).toBe(0);
  expect(ended!.outputs).toEqual({ asker: "asker got: 42", answerer: "answerer: your answer went to stage asker" });
}, 120_000);

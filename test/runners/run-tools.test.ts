/**
 * The run tools of the openai runner (docs/guides/messages-and-humans.md),
 * through the real binary, stages on pool workers, the fake provider
 * scripting the calls: `message` to a stage that has not started yet (it
 * gets it before its first turn), to a path that can never exist and to a
 * misspelt stage name (one sentence, "did you mean", nothing recorded); `ask_agent` to a finished stage (one sentence), and between
 * two siblings of a `ctx.parallel(…, { group: true })`: the question
 * reaches the other agent as a message and its `reply` is the asker's
 * tool result; a sibling that does not answer within `timeout_s` (one
 * sentence). A stage credential used with another run is refused.
 * `message` with files attached (`attach`): read in the stage's working
 * directory, copied into the run's artifacts, delivered in the message; a
 * file outside that directory (a link pointing out included), a missing
 * one and a directory are refused in one sentence each, nothing sent.
 */

import { expect, test } from "bun:test";
import { mkdirSync, readFileSync, readdirSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, type RecordedRequest, type Script } from "../helpers/fake-openai.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { StageTools } from "../../src/engine/mail/stage-tools.ts";
import type { MailTree } from "../../src/engine/mail/mail-tree.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "run-tools.ts");
const usage = { prompt: 10, completion: 5 };
type Messages = RecordedRequest["body"]["messages"];

const firstUser = (m: Messages) => String(m.find((x) => x.role === "user")?.content ?? "");
const toolResults = (m: Messages) => m.filter((x) => x.role === "tool").map((x) => String(x.content));

/** The writer stage makes `calls`, then answers with their results joined by " | "; every other stage is `other`. */
function writerScript(calls: { id: string; name: string; arguments: Record<string, unknown> }[], other: (prompt: string, results: string[]) => ReturnType<typeof text> | { toolCalls: typeof calls; usage: typeof usage }): Script {
  return (req) => {
    const m = req.body.messages;
    const prompt = firstUser(m);
    const results = toolResults(m);
    if (prompt.startsWith("write")) return results.length ? text(results.join(" | ")) : { toolCalls: calls, usage };
    return other(prompt, results);
  };
}

async function runFixture(script: Script, mode: string, opts: { cwd?: string; onEnd?: (home: string, runId: string) => void | Promise<void> } = {}) {
  const server = await startFakeOpenAI(script);
  const home = makeTempDir("atomic-run-tools-");
  try {
    const r = await runAtomic(["--home", home, "--json", "run", FIXTURE, "--input", `mode=${mode}`], {
      home,
      env: { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" },
      ...(opts.cwd ? { cwd: opts.cwd } : {}),
    });
    const out = r.stdout.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l) as Record<string, unknown>);
    const ended = out.find((e) => e.type === "run_ended") as { runId?: string; outputs?: Record<string, string>; status?: string } | undefined;
    if (ended?.runId) await opts.onEnd?.(home, ended.runId);
    return { r, ended, requests: server.requests };
  } finally {
    await server.close();
    removeTempDirs();
  }
}

test("message reaches a stage that has not started yet; a misspelt stage (did you mean), a path that can never exist and ask_agent to a finished stage are refused in one sentence, nothing recorded", async () => {
  const script = writerScript(
    [
      { id: "m1", name: "message", arguments: { to: "reader", text: "the secret is 42" } },
      { id: "m2", name: "message", arguments: { to: "writer/inner", text: "x" } },
      { id: "m3", name: "message", arguments: { to: "raeder", text: "to a typo" } },
    ],
    (prompt, results) => (results.length ? text(`${prompt} | ${results.join(" | ")}`) : { toolCalls: [{ id: "a1", name: "ask_agent", arguments: { to: "writer", question: "still there?" } }], usage }),
  );
  let inbox = "";
  const { r, ended } = await runFixture(script, "message", { onEnd: async (home, runId) => void (inbox = (await runAtomic(["inbox", runId, "--json"], { home })).stdout) });
  expect(r.code).toBe(0);
  const { writer, reader } = ended!.outputs!;
  const [sent, refused, typo] = writer!.split(" | ");
  // A name the workflow's code has: no warning that the stage has not started yet.
  expect(sent).toBe("sent to reader (queued until it starts)");
  expect(refused).toStartWith("error: ");
  expect(refused).toContain("writer/inner");
  // The misspelt name is checked against the stage names of the workflow's code, as `atomic send` does.
  expect(typo).toBe(`error: run ${ended!.runId} has no stage raeder: no stage of its workflow is named raeder (hint: did you mean: reader)`);
  // The reader got the message before its first turn, and asking the finished writer was refused.
  expect(reader).toContain("the secret is 42");
  expect(reader).not.toContain("to a typo");
  expect(reader).toContain("error: stage writer has finished, so it cannot answer; use its result, or ask a stage that runs");
  // Only the message that went is in the run's inbox: the refused ones left nothing.
  const texts = (JSON.parse(inbox) as { stages: { stage: string; messages: { text: string }[] }[] }).stages.flatMap((s) => s.messages.map((m) => `${s.stage}: ${m.text}`));
  expect(texts).toEqual(["reader: the secret is 42"]);
}, 120_000);

test("message with files attached: read in the stage's directory, copied into the run's artifacts, delivered in the message; files outside it, missing or a directory refused", async () => {
  const project = makeTempDir("atomic-run-tools-project-");
  const outside = makeTempDir("atomic-run-tools-outside-");
  writeFileSync(join(project, "notes.md"), "# Notes\nthe header must be blue\n");
  writeFileSync(join(project, "mock.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 13]));
  mkdirSync(join(project, "sub"));
  writeFileSync(join(outside, "secret.txt"), "not yours\n");
  symlinkSync(join(outside, "secret.txt"), join(project, "link.txt"));
  const out = relative(realpathSync(project), realpathSync(join(outside, "secret.txt")));
  const call = (id: string, attach: string[]) => ({ id, name: "message", arguments: { to: "reader", text: `files ${id}`, attach } });
  const script = writerScript([call("m1", ["notes.md", "mock.png"]), call("m2", ["notes.md", join(outside, "secret.txt")]), call("m3", ["link.txt"]), call("m4", ["missing.md"]), call("m5", ["sub"])], (prompt) => text(prompt));
  let copies: string[] = [];
  let dirs: string[] = [];
  let sameBytes = false;
  const { r, ended } = await runFixture(script, "attach", {
    cwd: project,
    onEnd: (home, runId) => {
      const root = join(home, "artifacts", runId, "attachments");
      dirs = readdirSync(root);
      copies = dirs.flatMap((d) => readdirSync(join(root, d)).map((f) => join(root, d, f)));
      sameBytes = copies.every((c) => readFileSync(c).equals(readFileSync(join(project, c.split("/").at(-1)!))));
    },
  });
  expect(r.code).toBe(0);
  const [sent, ...refused] = ended!.outputs!.writer!.split(" | ");
  expect(sent).toBe("sent to reader (queued until it starts), with notes.md, mock.png attached");
  expect(refused).toEqual([
    `error: cannot attach ${join(outside, "secret.txt")}: it is outside your working directory (${out}); attach only files in it`,
    `error: cannot attach link.txt: it is outside your working directory (${out}); attach only files in it`,
    "error: cannot attach missing.md: no such file in your working directory",
    "error: cannot attach sub: it is a directory; attach its files one by one",
  ]);
  // One message went, with its two copies, byte for byte; the refused calls left nothing.
  expect(dirs).toHaveLength(1);
  expect(copies.map((c) => c.split("/").at(-1)).sort()).toEqual(["mock.png", "notes.md"]);
  expect(sameBytes).toBe(true);
  const reader = ended!.outputs!.reader!;
  expect(reader).toContain("files m1");
  expect(reader).toContain(`<file path="${copies.find((c) => c.endsWith("notes.md"))}">\n# Notes\nthe header must be blue\n`);
  expect(reader).toContain(`(binary: read it from ${copies.find((c) => c.endsWith("mock.png"))})`);
  expect(reader).not.toContain("not yours");
  expect(reader).not.toContain("files m2");
}, 120_000);

test("ask_agent between two group siblings: the question arrives as a message, the reply is the asker's tool result", async () => {
  let askSeen!: () => void;
  const asked = new Promise<void>((resolve) => (askSeen = resolve));
  const script: Script = (req) => {
    const m = req.body.messages;
    const prompt = firstUser(m);
    const results = toolResults(m);
    if (prompt.startsWith("ask")) {
      if (results.length) return text(`asker got: ${results[0]}`);
      askSeen();
      return { toolCalls: [{ id: "q1", name: "ask_agent", arguments: { to: "answerer", question: "what is 6*7?", timeout_s: 120 } }], usage };
    }
    if (results.some((t) => t.startsWith("your answer went to"))) return text(`answerer: ${results.at(-1)}`);
    const question = m.map((x) => String(x.content ?? "")).find((c) => c.includes("Question a"));
    const id = question ? /Question (a[0-9a-f]+) from stage asker/.exec(question)?.[1] : undefined;
    if (id) return { toolCalls: [{ id: "r1", name: "reply", arguments: { id, text: "42" } }], usage };
    // Busy until the question comes (a steer message, injected before its next turn).
    return { toolCalls: [{ id: `l${results.length}`, name: "list", arguments: {} }], usage, hold: results.length === 0 ? asked : undefined, paceMs: 50 };
  };
  const { r, ended, requests } = await runFixture(script, "group");
  expect(r.code).toBe(0);
  expect(ended!.outputs).toEqual({ asker: "asker got: 42", answerer: "answerer: your answer went to stage asker" });
  // Each sibling was told the other's name.
  const system = (p: string) => String(requests.find((q) => firstUser(q.body.messages).startsWith(p))!.body.messages[0]!.content);
  expect(system("answer")).toContain("in a group: asker;");
  expect(system("ask")).toContain("in a group: answerer;");
}, 120_000);

test("ask_agent to a sibling that does not answer in time: the asker's tool result says so in one sentence, and the run goes on", async () => {
  const askerDone = Promise.withResolvers<void>();
  const script: Script = (req) => {
    const m = req.body.messages;
    const results = toolResults(m);
    if (firstUser(m).startsWith("ask")) {
      if (results.length) {
        askerDone.resolve();
        return text(`asker got: ${results[0]}`);
      }
      return { toolCalls: [{ id: "q1", name: "ask_agent", arguments: { to: "answerer", question: "what is 6*7?", timeout_s: 1 } }], usage };
    }
    // The answerer is busy until the asker has given up, and never replies.
    return { ...text("answerer done"), hold: askerDone.promise };
  };
  const { r, ended } = await runFixture(script, "group");
  expect(r.code).toBe(0);
  expect(ended!.outputs!.asker).toMatch(/^asker got: error: stage answerer did not answer question a[0-9a-f]+ within 1 s; go on without it, or ask again with a longer timeout_s$/);
  expect(ended!.outputs!.answerer).toBe("answerer done");
}, 120_000);

test("a stage credential used with another run is refused in one sentence; an ended attempt's too", async () => {
  const tree = { lease: { rootId: "runB" } } as unknown as MailTree;
  const tools = new StageTools(tree, async () => {});
  expect(await tools.handle("runA.abc", "message", { to: "x", text: "y" })).toEqual({ ok: false, output: "error: this stage credential belongs to run runA, not to run runB; a stage can reach only its own run" });
  const token = tools.mint({ runId: "runB" as never, stageKey: "0", path: "s", name: "s", attempt: 1, tools: ["message"] });
  tools.revoke(token);
  expect(await tools.handle(token, "message", { to: "x", text: "y" })).toEqual({ ok: false, output: "error: this stage credential is not valid any more (its attempt of run runB ended)" });
});

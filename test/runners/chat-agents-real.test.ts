/**
 * The real opencode and pi CLIs (pinned in test/agents) as atomic stages
 * through dist/atomic on a pool worker, each isolated (helpers/chat-agents.ts)
 * and pointed at the fake Chat Completions provider, which logs what they
 * sent: a text reply after a tool call (their shell tool `bash`) with a
 * 300 KiB prompt delivered through stdin unchanged (no quotes added),
 * usage exactly what the provider reported and the CLI's own cost; provider
 * errors mapped to the openai runner's codes (401, 400, 429 with
 * Retry-After, a 500 the CLI's own retry survives, a stream cut off, an error inside the stream with and without its type and code);
 * tools named in atomic's terms (`tools: []`: none offered); followUp, steer
 * and interrupt sent with `atomic send` to a live stage
 * (pi: its own steer/follow_up/abort; opencode: queued and delivered by
 * resuming the session with `-s`), usage summed across turns and resumes;
 * `atomic cancel` and Ctrl-C while their bash tool runs a long command: none
 * of the stage's processes is left. Every other connection goes to a trap
 * (helpers/chat-agents.ts): the file fails if any CLI tried one. The
 * tests are heavy (helpers/heavy.ts: at most one per core at once) and wait
 * on events (the fake's requests, the run's own lines, the tool's pid file)
 * within the limits of helpers/agents.ts.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, untilEvent, waitUntil } from "../helpers/atomic.ts";
import { AGENT_STEP_LIMIT_MS, AGENT_TEST_LIMIT_MS, agentTest } from "../helpers/agents.ts";
import { chatAgentSetup, MODEL, startNetworkTrap, type ChatAgent, type ChatAgentSetup } from "../helpers/chat-agents.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { startFakeOpenAI, text, toolCall, type FakeOpenAI, type RecordedRequest, type Reply, type Script } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle } from "../e2e/support.ts";
import { startOtlpReceiver, type ReceivedSpan } from "../helpers/otlp-receiver.ts";
import { describeRun, shownStage } from "../helpers/real-agent-stage.ts";
import { pidsRunning } from "../helpers/processes.ts";

const WORKFLOW = join(import.meta.dir, "fixtures", "chat-agent-stages.ts");
const KINDS: ChatAgent[] = ["opencode", "pi"];
const servers: FakeOpenAI[] = [];
const trap = startNetworkTrap();

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await cleanupNow();
  await Promise.all(servers.map((s) => s.close()));
  trap.stop();
  // Nothing of any test reached anything but its fake provider.
  expect(trap.strays).toEqual([]);
});

/** The text of every user message of a request (content as a string or as parts). */
function userTexts(req: RecordedRequest): string[] {
  return req.body.messages
    .filter((m) => m.role === "user")
    .map((m) => (typeof m.content === "string" ? m.content : (m.content as unknown as { text?: string }[] | null ?? []).map((p) => p.text ?? "").join("")));
}
const hasToolResult = (req: RecordedRequest) => req.body.messages.some((m) => m.role === "tool");

async function server(script: Script): Promise<FakeOpenAI> {
  const s = await startFakeOpenAI(script);
  servers.push(s);
  return s;
}

interface StageOut {
  text: string;
  status: string;
  usage: Record<string, unknown> | null;
  error: { code: string; message: string } | null;
}

interface RunOptions {
  /** more arguments of `atomic run` */
  extra?: string[];
  setup?: Parameters<typeof chatAgentSetup>[2];
  env?: Record<string, string>;
  /** called with the fresh home, cwd and environment before the run */
  prepare?: (setup: ChatAgentSetup) => void;
}

async function runStages(kind: ChatAgent, s: FakeOpenAI, prompts: string[], opts: RunOptions = {}): Promise<StageOut[] & ChatAgentSetup & { runId: string }> {
  const made = chatAgentSetup(kind, s.url, { trap, ...opts.setup });
  const { home, cwd } = made;
  const env = { ...made.env, ...opts.env };
  opts.prepare?.({ home, cwd, env });
  const file = join(home, "prompts.json");
  writeFileSync(file, JSON.stringify(prompts));
  const r = await runAtomic(["run", WORKFLOW, "--json", "--workers", "1", "--input", `runner=${kind}`, "--input", `model=${MODEL}`, "--input", `prompts=@${file}`, ...(opts.extra ?? [])], { home, cwd, env, timeoutMs: AGENT_TEST_LIMIT_MS });
  if (r.code !== 0) throw new Error(`atomic run exited ${r.code}: ${r.stderr}`);
  const result = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
  return Object.assign(result.outputs.stages as StageOut[], { home, cwd, env, runId: result.runId as string });
}

const shellArgs = (kind: ChatAgent, command: string) => (kind === "opencode" ? { command, description: "run it" } : { command });

/**
 * opencode in its default sandbox (no sandbox option), probed by the bash tool call of its 300 KiB case below, which
 * carries this case too (one start for both, docs/design/testing.md "Session 13: chat-agents-real's starts"): the
 * probe changes neither the prompt, the replies, the usage nor the requests that case checks, and traces on change
 * nothing of the sandbox. The probe is a script in the cwd (as a hostile file of a repository would be): opencode's
 * own permission check stops a command that names a path outside its directory (external_directory: "ask", which a
 * headless run cannot answer; atomic passes opencode no permission settings), so the command names none and the
 * sandbox is what the script meets. The cwd is a git repository, as a user's usually is: opencode keeps no snapshot
 * store of it (`snapshot: false`, opencode.ts).
 */
const SANDBOX_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nplanted-opencode-key\n-----END OPENSSH PRIVATE KEY-----\n";
const SANDBOX_CASE = "; in its default sandbox (no sandbox option) its bash tool cannot read ~/.ssh nor the atomic home, nor write outside the cwd; its work succeeds; no snapshot store of the git cwd";

function plantSandboxProbe({ home, cwd, env }: ChatAgentSetup): string {
  mkdirSync(join(env.HOME!, ".ssh"));
  writeFileSync(join(env.HOME!, ".ssh", "id_ed25519"), SANDBOX_KEY);
  writeFileSync(join(home, "planted-secret"), "atomic-home-secret\n");
  const outside = makeTempDir("atomic-opencode-outside-");
  writeFileSync(
    join(cwd, "probe.sh"),
    [
      `cat "$HOME/.ssh/id_ed25519" 2>/dev/null && echo SSH=READ || echo SSH=DENIED`,
      `cat "${home}/planted-secret" >/dev/null 2>&1 && echo ATOMIC_HOME=READ || echo ATOMIC_HOME=DENIED`,
      `echo x > "${outside}/escaped" 2>/dev/null && echo OUTSIDE=WRITTEN || echo OUTSIDE=DENIED`,
      `echo done > result.txt && echo WORK=DONE`,
    ].join("\n"),
  );
  const git = Bun.spawnSync(["sh", "-c", "git init -q && git add probe.sh && git -c user.name=t -c user.email=t@t commit -qm probe"], { cwd });
  expect(git.exitCode).toBe(0);
  return outside;
}

function expectSandboxed(s: FakeOpenAI, { cwd, env }: ChatAgentSetup, outside: string): void {
  const said = String(s.requests[1]!.body.messages.find((m) => m.role === "tool")!.content);
  for (const seen of ["SSH=DENIED", "ATOMIC_HOME=DENIED", "OUTSIDE=DENIED", "WORK=DONE"]) expect(said).toContain(seen);
  expect(JSON.stringify(s.requests.map((q) => q.body))).not.toContain("planted-opencode-key");
  expect(existsSync(join(outside, "escaped"))).toBe(false);
  expect(readFileSync(join(cwd, "result.txt"), "utf8")).toBe("done\n");
  expect(existsSync(join(env.XDG_DATA_HOME!, "opencode", "opencode.db"))).toBe(true);
  expect(existsSync(join(env.XDG_DATA_HOME!, "opencode", "snapshot"))).toBe(false);
}

for (const kind of KINDS) {
  agentTest(
    `${kind}: a 300 KiB prompt through stdin, unchanged; a bash tool call (its shell has the stage span's TRACEPARENT), then the answer; usage and cost exactly the provider's${kind === "opencode" ? SANDBOX_CASE : ""}`,
    async () => {
      const prompt = `TOOL please ${"x".repeat(300 * 1024)}`;
      const sandboxed = kind === "opencode";
      const probe = sandboxed ? "sh probe.sh; " : "";
      const s = await server((req) =>
        hasToolResult(req)
          ? text("all done", { prompt: 100, completion: 7, cached: 30 })
          : toolCall("bash", shellArgs(kind, `${probe}echo hi-from-tool "traceparent=$TRACEPARENT"`), { usage: { prompt: 10, completion: 5 } }),
      );
      // Traces on, to a local receiver: the CLI, and the shell its tool runs, get the stage attempt's span as TRACEPARENT.
      const otlp = await startOtlpReceiver();
      let stages: Awaited<ReturnType<typeof runStages>>;
      let outside = "";
      let stageSpan: ReceivedSpan;
      try {
        stages = await runStages(kind, s, [prompt], { env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url }, ...(sandboxed ? { prepare: (made: ChatAgentSetup) => void (outside = plantSandboxProbe(made)) } : {}) });
        // The run has exited, its spans flushed: the stage's is among them.
        stageSpan = otlp.spans.items.find((x) => x.name === "invoke_agent s0")!;
        expect(stageSpan).toBeDefined();
      } finally {
        await otlp.close();
      }
      const stage = stages[0]!;
      expect(stage.error).toBeNull();
      expect(stage).toMatchObject({ status: "completed", text: "all done" });
      // input excludes cache reads (10 + 70); cost from the CLI's own price table: (80×1 + 12×2 + 30×0.5) per million
      expect(stage.usage).toMatchObject({ inputTokens: 80, outputTokens: 12, cacheReadTokens: 30, cacheWriteTokens: 0, costMicroUsd: 119, turns: 2 });
      // every call the provider saw is counted: no title-generation call of opencode's
      expect(s.requests.length).toBe(2);
      expect(userTexts(s.requests[0]!).at(-1)!.trimEnd()).toBe(prompt);
      const tool = s.requests[1]!.body.messages.find((m) => m.role === "tool")!;
      expect(String(tool.content)).toContain(`hi-from-tool traceparent=00-${stageSpan.traceId}-${stageSpan.spanId}-01`);
      if (sandboxed) expectSandboxed(s, stages, outside);
    },
  );

  agentTest(
    `${kind}: provider errors mapped to the shared codes; a 500 its own retry survives, its answer priced from atomic's table (a model the CLI's config gives no price)`,
    async () => {
      // The surviving stage also carries the priced half of the pricing case (one start fewer, docs/design/testing.md
      // "Session 13: chat-agents-real's starts"): prices are read only from a completed turn's usage, which no error
      // case has, and no error's mapping reads a price. atomic's table names the model as the CLI reports it
      // (opencode: the stage's provider/model; pi: the model id).
      const model = kind === "opencode" ? MODEL : "m";
      const seen = new Map<string, number>();
      const s = await server((req) => {
        const said = userTexts(req).join(" ");
        const marker = /\b(E401|E400|E429|E500ONCE|CUT|STREAMERR|STREAMKIND)\b/.exec(said)?.[1] ?? "";
        const n = seen.get(marker) ?? 0;
        seen.set(marker, n + 1);
        const err = (status: number, message: string, headers: Record<string, string> = {}): Reply => ({ status, headers, body: JSON.stringify({ error: { message } }) });
        if (marker === "E401") return err(401, "the key is wrong");
        if (marker === "E400") return err(400, "messages is malformed");
        if (marker === "E429") return err(429, "slow down please", { "retry-after": "1" });
        if (marker === "E500ONCE") return n === 0 ? err(500, "upstream hiccup") : text("survived", { prompt: 100, completion: 10 });
        if (marker === "CUT") return { text: ["partial ", "more"], cutOff: true };
        const partial = `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: "par" }, finish_reason: null }] })}\n\n`;
        if (marker === "STREAMERR") return { raw: [partial, `data: ${JSON.stringify({ error: { message: "the stream broke down" } })}\n\n`] };
        const kind = { message: "the context is too long", type: "invalid_request_error", code: "context_length_exceeded" };
        if (marker === "STREAMKIND") return { raw: [partial, `data: ${JSON.stringify({ error: kind })}\n\n`] };
        return text("?");
      });
      const stages = await runStages(kind, s, ["E401", "E400", "E429", "E500ONCE", "STREAMERR", "STREAMKIND", ...(kind === "opencode" ? ["CUT"] : [])], {
        setup: { unpriced: true, pricing: { [model]: { inputPerMTok: 3, outputPerMTok: 10 } } },
      });
      const exit = new RegExp(`\\(${kind} exited with status \\d+\\)$`);
      for (const i of [0, 1, 2, 4, 5]) expect(stages[i]!.error!.message).toMatch(exit);
      expect(stages[0]).toMatchObject({ status: "failed", error: { code: "provider_auth" } });
      expect(stages[0]!.error!.message).toContain(kind);
      expect(stages[0]!.error!.message).toContain("the key is wrong");
      expect(stages[1]).toMatchObject({ status: "failed", error: { code: "provider_bad_request" } });
      expect(stages[1]!.error!.message).toContain("messages is malformed");
      expect(stages[2]).toMatchObject({ status: "failed", error: { code: "provider_rate_limit" } });
      expect(stages[2]!.error!.message).toContain("slow down please");
      // the back-off is shared with the host's other stages of this CLI and model (runners/rate-limits.ts)
      expect(readdirSync(join(stages.home, "rate-limits")).filter((f) => f.endsWith(".json")).length).toBe(1);
      expect(stages[3]).toMatchObject({ status: "completed", text: "survived" });
      expect(stages[3]!.error).toBeNull();
      expect(stages[3]!.usage).toMatchObject({ inputTokens: 100, outputTokens: 10, costMicroUsd: 400 });
      expect(stages[3]!.usage!.unpriced).toBeUndefined();
      // an error inside the stream has no HTTP status: the provider's (retryable, as the openai runner's mid-stream error), in its words
      expect(stages[4]).toMatchObject({ status: "failed", error: { code: "provider_unavailable" } });
      expect(stages[4]!.error!.message).toStartWith(`${kind}: the provider reported an error (inside its reply stream): the stream broke down`);
      // its type and code: opencode passes the provider's error object on (mapped by them); pi passes only the message
      if (kind === "opencode") {
        expect(stages[5]).toMatchObject({ status: "failed", error: { code: "provider_bad_request" } });
        expect(stages[5]!.error!.message).toStartWith("opencode: the provider refused the request (inside its reply stream, invalid_request_error context_length_exceeded): the context is too long");
        expect(stages[6]).toMatchObject({ status: "failed", error: { code: "provider_bad_response" } });
      } else {
        expect(stages[5]).toMatchObject({ status: "failed", error: { code: "provider_unavailable" } });
        expect(stages[5]!.error!.message).toStartWith("pi: the provider reported an error (inside its reply stream): the context is too long");
      }
    },
  );
}

for (const kind of KINDS) {
  agentTest(
    `${kind}: tools in atomic's terms: ["bash", "read"] offers only the CLI's own shell and read tools; [] offers none; a model its config gives no price, atomic's table neither: the stage says unpriced (not $0)`,
    async () => {
      // The unpriced half of the pricing case rides on these stages (one start fewer, docs/design/testing.md
      // "Session 13: chat-agents-real's starts"): a price in the CLI's config changes no tool it offers, and the
      // tools change no usage. Its priced half is the surviving stage of the provider errors' case.
      const s = await server(() => text("fine", { prompt: 100, completion: 10 }));
      const stages = await runStages(kind, s, ["TOOLS-SOME", "TOOLS-NONE"], { extra: ["--input", `tools=${JSON.stringify([["bash", "read"], []])}`], setup: { unpriced: true } });
      expect(stages.map((x) => x.status)).toEqual(["completed", "completed"]);
      expect(stages[0]!.error).toBeNull();
      expect(stages[0]!.usage).toMatchObject({ inputTokens: 100, outputTokens: 10, costMicroUsd: 0, unpriced: true });
      const offered = (marker: string) => {
        const req = s.requests.find((r) => userTexts(r).some((t) => t.includes(marker)))!;
        return (req.body.tools ?? []).map((t) => t.function.name).sort();
      };
      expect(offered("TOOLS-SOME")).toEqual(["bash", "read"]);
      expect(offered("TOOLS-NONE")).toEqual([]);
    },
  );

  agentTest(
    `${kind}: a tool the stage did not allow, called anyway, is refused by ${kind} and is a warning on the stage (transcript and show)`,
    async () => {
      const s = await server((req) => (hasToolResult(req) ? text("could not") : toolCall("bash", shellArgs(kind, "echo hi > out.txt"))));
      const stages = await runStages(kind, s, ["DENY"], { extra: ["--input", `tools=${JSON.stringify(["read"])}`] });
      expect(stages[0]).toMatchObject({ status: "completed", text: "could not" });
      const seen = await shownStage(stages.home, stages.env, stages.runId, "s0");
      // opencode answers through its "invalid" tool, which no longer has the model's arguments; pi keeps them
      const said = kind === "opencode" ? /opencode refused the tool bash: Model tried to call unavailable tool 'bash'\. Available tools: invalid, read\./ : /pi refused the tool bash \(\{"command":"echo hi > out.txt"\}\): Tool bash not found/;
      const warning = new RegExp(`${said.source}; hint: name it in the stage's tools to allow it, e\\.g\\. tools: \\["read","bash"\\]`);
      expect(seen.show).toMatch(new RegExp(`warning: ${warning.source}`));
      expect(seen.transcript).toMatch(new RegExp(`## Warning\\s+${warning.source}`));
    },
  );

  agentTest(
    `${kind}: atomic send to the live stage: a followUp after the first answer, then an interrupt that resumes the same session; usage summed across the turns`,
    async () => {
      let release!: () => void;
      const first = new Promise<void>((r) => (release = r));
      const never = new Promise<void>(() => {});
      const s = await server((req) => {
        const last = userTexts(req).at(-1) ?? "";
        if (last.includes("INTERRUPT")) return text("final answer", { prompt: 20, completion: 5 });
        if (last.includes("FOLLOW")) return { text: "never", hold: never };
        return { ...text("first answer", { prompt: 10, completion: 5 }), hold: first };
      });
      const { home, cwd, env } = chatAgentSetup(kind, s.url, { trap });
      const proc = spawnAtomic(["run", WORKFLOW, "--json", "--workers", "1", "--input", `runner=${kind}`, "--input", `model=${MODEL}`, "--input", `prompts=${JSON.stringify(["HOLD first"])}`], { home, cwd, env });
      const out = lineWatcher(proc.stdout);
      const started = JSON.parse(await out.waitFor(/"type":"run_started"/, AGENT_STEP_LIMIT_MS));
      await untilEvent(s.requestMatching(() => true), "the first model request", { proc, limitMs: AGENT_STEP_LIMIT_MS });
      const send = async (message: string, mode: string) => {
        const r = await runAtomic(["send", started.runId, "s0", message, "--mode", mode], { home, env });
        expect(r.code).toBe(0);
      };
      await send("FOLLOW second", "followUp");
      release();
      await untilEvent(s.requestMatching((r) => userTexts(r).at(-1)!.includes("FOLLOW")), "the followUp's request", { proc, limitMs: AGENT_STEP_LIMIT_MS });
      await send("INTERRUPT third", "interrupt");
      expect(await proc.exited).toBe(0);
      const stage = (JSON.parse(out.lines.at(-1)!).outputs.stages as StageOut[])[0]!;
      expect(stage.error).toBeNull();
      expect(stage).toMatchObject({ status: "completed", text: "final answer" });
      // the interrupt's request continues the same conversation (resumed session / same pi process)
      const last = s.requests.at(-1)!;
      expect(userTexts(last).map((t) => t.trimEnd())).toEqual(["HOLD first", "FOLLOW second", "INTERRUPT third"]);
      expect(last.body.messages.some((m) => m.role === "assistant" && String(m.content ?? "").includes("first answer"))).toBe(true);
      // the aborted request reported nothing; the two answered ones count once each
      expect(stage.usage).toMatchObject({ inputTokens: 30, outputTokens: 10, cacheReadTokens: 0, costMicroUsd: 50, turns: 2 });
    },
  );
}

for (const kind of KINDS) {
  agentTest(
    `${kind}: a steer sent while the model answers reaches it in the same conversation (pi: its own steer; opencode: queued, then the session resumed)`,
    async () => {
      let release!: () => void;
      const first = new Promise<void>((r) => (release = r));
      const s = await server((req) => {
        const last = userTexts(req).at(-1) ?? "";
        if (last.includes("STEER")) return text("steered", { prompt: 20, completion: 5 });
        return { ...text("first answer", { prompt: 10, completion: 5 }), hold: first };
      });
      const { home, cwd, env } = chatAgentSetup(kind, s.url, { trap });
      const proc = spawnAtomic(["run", WORKFLOW, "--json", "--workers", "1", "--input", `runner=${kind}`, "--input", `model=${MODEL}`, "--input", `prompts=${JSON.stringify(["HOLD first"])}`], { home, cwd, env });
      const out = lineWatcher(proc.stdout);
      const started = JSON.parse(await out.waitFor(/"type":"run_started"/, AGENT_STEP_LIMIT_MS));
      await untilEvent(s.requestMatching(() => true), "the first model request", { proc, limitMs: AGENT_STEP_LIMIT_MS });
      expect((await runAtomic(["send", started.runId, "s0", "STEER smaller diff", "--mode", "steer"], { home, env })).code).toBe(0);
      release();
      expect(await proc.exited).toBe(0);
      const stage = (JSON.parse(out.lines.at(-1)!).outputs.stages as StageOut[])[0]!;
      expect(stage).toMatchObject({ status: "completed", text: "steered" });
      expect(s.requests.length).toBe(2);
      expect(userTexts(s.requests[1]!).map((t) => t.trimEnd())).toEqual(["HOLD first", "STEER smaller diff"]);
      expect(stage.usage).toMatchObject({ inputTokens: 30, outputTokens: 10, costMicroUsd: 50, turns: 2 });
    },
  );
}

for (const kind of KINDS) {
  for (const how of ["atomic cancel", "Ctrl-C (SIGINT) of atomic run"] as const) {
    agentTest(
      `${kind}: ${how} with a long-running bash tool: no process of the stage is left`,
      async () => {
        // The stage runs in its default sandbox (a pid namespace of its own, so `$!` would mislead): the marker is
        // a file in the cwd, and the sleep is found by its command line (a length of its own).
        const sleep = ["sleep", String(600 + Math.floor(Math.random() * 100_000))];
        const never = new Promise<void>(() => {});
        const s = await server((req) => (hasToolResult(req) ? { text: "never", hold: never } : toolCall("bash", shellArgs(kind, `${sleep.join(" ")} & echo started > started; wait`))));
        const { home, cwd, env } = chatAgentSetup(kind, s.url, { trap });
        const marker = join(cwd, "started");
        const proc = spawnAtomic(["run", WORKFLOW, "--json", "--workers", "1", "--input", `runner=${kind}`, "--input", `model=${MODEL}`, "--input", `prompts=${JSON.stringify(["work"])}`], { home, cwd, env });
        const out = lineWatcher(proc.stdout);
        const started = JSON.parse(await out.waitFor(/"type":"run_started"/, AGENT_STEP_LIMIT_MS));
        // the marker is polled: it is written by a process of the CLI's own
        const describe = describeRun(proc, out, s);
        await untilEvent(waitUntil(() => existsSync(marker) && readFileSync(marker, "utf8").trim() !== "", AGENT_STEP_LIMIT_MS, "the tool to start"), "the tool to start", { proc, limitMs: AGENT_STEP_LIMIT_MS, describe });
        // (the marker is written right after the fork, maybe before the forked shell has exec'd the sleep)
        await waitUntil(() => pidsRunning(sleep).length > 0, AGENT_STEP_LIMIT_MS, "the tool's sleep to run");
        expect(pidsRunning(sleep).length).toBe(1);
        if (how === "atomic cancel") expect((await runAtomic(["cancel", started.runId], { home, env })).code).toBe(0);
        else proc.kill("SIGINT");
        await proc.exited;
        await waitUntil(() => pidsRunning(sleep).length === 0, AGENT_STEP_LIMIT_MS, "the tool's sleep to end");
      },
    );
  }
}

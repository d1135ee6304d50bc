/**
 * The fake OpenAI-compatible server of the tests (test/helpers/fake-openai.ts)
 * as a process of its own, for benchmarks: `bun bench/fake-openai-server.ts`
 * prints `url <base url>` and serves until killed. Its script, by the first
 * user message of a request:
 *
 * - "deltas:N": a reply of N text deltas, at once;
 * - "latency:I": a model answering in the time `latencyMs(I, turn)`
 *   (300-800 ms, the same for the same stage and turn in every run), its
 *   20 text deltas spread over that time; with LATENCY_TURNS > 1 the first
 *   turns of a stage ask for the `list` tool, the last answers;
 * - "bash:COMMAND": a `bash` tool call running COMMAND, then (once the tool
 *   result is in the history) a short final answer;
 * - anything else: a `list` tool call while the history holds fewer than
 *   TURNS-1 tool results, then a final text.
 */

import { startFakeOpenAI, type Reply } from "../test/helpers/fake-openai.ts";
import { latencyMs } from "./latency.ts";

const TURNS = Number(process.env.FAKE_TURNS ?? 20);
const LATENCY_TURNS = Number(process.env.FAKE_LATENCY_TURNS ?? 1);
const usage = { prompt: 100, completion: 10 };
const server = await startFakeOpenAI((req): Reply => {
  const first = req.body.messages.find((m) => m.role === "user")?.content ?? "";
  const tools = req.body.messages.filter((m) => m.role === "tool").length;
  const deltas = /^deltas:(\d+)/.exec(first);
  if (deltas) return { text: Array.from({ length: Number(deltas[1]) }, (_, i) => `d${i % 10} `), usage };
  const paced = /^latency:(\d+)/.exec(first);
  if (paced) {
    const paceMs = latencyMs(Number(paced[1]), tools);
    if (tools < LATENCY_TURNS - 1) return { toolCalls: [{ name: "list", arguments: {} }], usage, paceMs };
    return { text: Array.from({ length: 20 }, (_, i) => `w${i} `), usage, paceMs };
  }
  const bash = /^bash:(.*)$/s.exec(first);
  if (bash) return tools === 0 ? { toolCalls: [{ name: "bash", arguments: { command: bash[1]! } }], usage } : { text: "done", usage };
  return tools < TURNS - 1 ? { toolCalls: [{ name: "list", arguments: {} }], usage } : { text: "done", usage };
});
process.stdout.write(`url ${server.url}\n`);
process.on("SIGTERM", () => void server.close().then(() => process.exit(0)));
await new Promise(() => {});

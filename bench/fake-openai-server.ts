/**
 * The fake OpenAI-compatible server of the tests (test/helpers/fake-openai.ts)
 * as a process of its own, for benchmarks: `bun bench/fake-openai-server.ts`
 * prints `url <base url>` and serves until killed. Its script: a request whose
 * history holds fewer than TURNS-1 tool results gets a `list` tool call,
 * else a final text; a prompt starting with "deltas:N" gets N text deltas.
 */

import { startFakeOpenAI, type Reply } from "../test/helpers/fake-openai.ts";

const TURNS = Number(process.env.FAKE_TURNS ?? 20);
const usage = { prompt: 100, completion: 10 };
const server = await startFakeOpenAI((req): Reply => {
  const first = req.body.messages.find((m) => m.role === "user")?.content ?? "";
  const deltas = /^deltas:(\d+)/.exec(first);
  if (deltas) return { text: Array.from({ length: Number(deltas[1]) }, (_, i) => `d${i % 10} `), usage };
  const tools = req.body.messages.filter((m) => m.role === "tool").length;
  return tools < TURNS - 1 ? { toolCalls: [{ name: "list", arguments: {} }], usage } : { text: "done", usage };
});
process.stdout.write(`url ${server.url}\n`);
process.on("SIGTERM", () => void server.close().then(() => process.exit(0)));
await new Promise(() => {});

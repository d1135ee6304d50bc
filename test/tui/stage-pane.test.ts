/**
 * The tui's stage pane is `atomic attach` on the selected stage (tmux, the
 * real binary, the fake provider): an openai stage's model text and its
 * tool call with its arguments show as they come; `m` and a line steer it, and
 * `/followup` queues a message for after the turn; each shows its delivery
 * state in the pane, and the provider's request log shows both in the same
 * conversation. The stage's end shows in the pane too.
 */

import { afterEach, expect, test } from "bun:test";
import { startFakeOpenAI, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { Tmux } from "../helpers/tmux.ts";
import { startChat } from "../live/support.ts";
import { cleanup, newHome } from "./support.ts";

afterEach(cleanup);

const said = (req: RecordedRequest, text: string) => req.body.messages.some((m) => m.role === "user" && typeof m.content === "string" && m.content.includes(text));

test("the stage pane streams the stage's conversation live; m steers it and /followup queues a message, each with its delivery state", async () => {
  const gates = [0, 1, 2].map(() => Promise.withResolvers<void>());
  const replies: Reply[] = [
    { text: ["Looking ", "around ", "the tree. "], paceMs: 300, toolCalls: [{ name: "list", arguments: { path: "." } }], hold: gates[2]!.promise },
    { text: "Thinking more. ", toolCalls: [{ name: "list", arguments: { path: "." } }], hold: gates[0]!.promise },
    { text: ["Steered ", "by you."], paceMs: 100, hold: gates[1]!.promise },
    { text: "All done." },
  ];
  const fake = await startFakeOpenAI((_req, i) => replies[Math.min(i, replies.length - 1)]!);
  const home = newHome();
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  try {
    const run = await startChat(home, env, ["--workers", "1"]);
    await fake.requestMatching();
    const t = Tmux.atomic(["tui", run.runId], { home, env, cols: 120, rows: 40 });
    await t.waitFor(/── chat \(running\) live/);
    // "── live ──" is drawn once attach joined the transcript and the live stream (cli/attach-join.ts): the first
    // reply, held until then, comes live (text and `⚙ list` with its arguments), not in the transcript's words.
    await t.waitFor("── live ──");
    gates[2]!.resolve();
    await t.waitFor("Looking around the tree.");
    await t.waitFor(/⚙ list .*"path"/);
    // While the second call is out: a steer, taken into the loop's next call.
    await fake.requestMatching((r) => r.body.messages.some((m) => m.role === "tool"));
    t.keys("m");
    await t.waitFor("to chat: ");
    t.type("use the README");
    await t.waitFor("to chat: use the README"); // Enter after the field has the text (keys in one read can outrun it)
    t.keys("Enter");
    await t.waitFor(/→ you \(steer\) use the README .*\[delivered/);
    gates[0]!.resolve();
    const second = await fake.requestMatching((r) => said(r, "use the README"));
    expect(second.body.messages.some((m) => m.role === "tool")).toBe(true); // the same conversation, after the tool call
    // While the third call is out: a followUp, for after the turn.
    t.keys("m");
    await t.waitFor("to chat: ");
    t.type("/followup then summarize");
    await t.waitFor("to chat: /followup then summarize");
    t.keys("Enter");
    await t.waitFor(/→ you \(followUp\) then summarize .*\[(queued|delivered)/);
    gates[1]!.resolve();
    await t.waitFor("Steered by you.");
    const third = await fake.requestMatching((r) => said(r, "then summarize"));
    expect(said(third, "use the README")).toBe(true);
    await t.waitFor("All done.");
    await t.waitFor("── the stage ended: completed ──");
    expect(await run.proc.exited).toBe(0);
    t.keys("q");
    expect(await t.exited()).toBe(0);
  } finally {
    for (const g of gates) g.resolve();
    await fake.close();
  }
}, 90_000);

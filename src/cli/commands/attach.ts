/**
 * `atomic attach RUN [STAGE] [--json]`: sit with a stage while it works.
 *
 * Prints the stage's conversation so far, then follows it live (model
 * text as it streams, tool calls with arguments and results, usage per
 * turn, its attempts: a lost worker, then the next attempt), with each
 * message to it and its delivery state as the journal records it. A typed
 * line is a steer; /followup, /interrupt, /answer, /detach, /help
 * (cli/attach-terminal.ts). Without STAGE it follows the run's active
 * stages (Tab switches). Detaching never affects the stage.
 *
 * With --json: one JSON object per line for every item of the model
 * (`type` is the item's kind, with `runId`, `stage` (its position) and
 * `path`), and lines on stdin are read as the same commands.
 */

import { defineCommand } from "citty";
import { createInterface } from "node:readline";
import { AtomicError, UsageError } from "../../shared/errors.ts";
import { AttachFeed } from "../attach-feed.ts";
import { AttachTerminal, parseAttachLine } from "../attach-terminal.ts";
import { session, type CliSession } from "../session.ts";

export default defineCommand({
  meta: { name: "attach", description: "Follow a stage's conversation live and talk to it" },
  args: {
    run: { type: "positional", description: "run id (or a unique prefix)", required: true },
    stage: { type: "positional", description: 'stage path ("review/security"), name or position; default: every active stage', required: false },
  },
  async run({ args }) {
    const s = session();
    const run = await s.findRun(args.run).catch((err: unknown) => {
      if (err instanceof AtomicError && err.code === "unknown_run") {
        throw new UsageError("unknown_run", err.message, { hint: "is it a run of another journal? attach with that --home or --journal; list this one's runs with: atomic runs" });
      }
      throw err;
    });
    const journal = await s.journal();
    const feed = await AttachFeed.open(journal, s.globals.home, run, args.stage);
    try {
      if (s.globals.json) await followJson(s, feed);
      else await followTerminal(s, feed);
    } finally {
      feed.close();
    }
  },
});

async function followTerminal(s: CliSession, feed: AttachFeed): Promise<void> {
  const term = new AttachTerminal(feed, s.style);
  if (feed.model.active.length === 0) {
    // Nothing live: the transcript and how it ended, then back to the shell.
    term.printAll();
    return;
  }
  feed.onEnded = () => term.ended();
  term.start();
  feed.start();
  await term.finished;
}

async function followJson(s: CliSession, feed: AttachFeed): Promise<void> {
  const model = feed.model;
  const emit = (ref: { runId: string; position: string; path: string }, item: { kind: string }) => {
    const { kind, ...rest } = item as Record<string, unknown> & { kind: string };
    s.json({ type: kind, runId: ref.runId, stage: ref.position, path: ref.path, ...rest });
  };
  for (const ref of model.followed) for (const item of model.items(ref)) emit(ref, item);
  if (model.active.length === 0) return;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  model.on(emit);
  feed.onEnded = (status) => {
    s.json({ type: "ended", status });
    done();
  };
  const detach = () => {
    s.json({ type: "detached" });
    done();
  };
  process.on("SIGINT", detach);
  process.on("SIGTERM", detach);
  // Commands on stdin, as on the terminal; the end of stdin is not a detach (a program may give none).
  const rl = createInterface({ input: process.stdin, terminal: false });
  rl.on("line", (line) => {
    const cmd = parseAttachLine(line.startsWith("//") ? line.slice(1) : line);
    if (typeof cmd === "string") return s.json({ type: "error", message: cmd });
    const fail = (err: unknown) => s.json({ type: "error", message: (err as Error).message, ...((err as { hint?: string }).hint ? { hint: (err as { hint?: string }).hint } : {}) });
    if (cmd.kind === "send") void feed.send(cmd.text, cmd.mode).catch(fail);
    else if (cmd.kind === "answer") void feed.answer(cmd.question, cmd.text).catch(fail);
    else if (cmd.kind === "detach") detach();
  });
  feed.start();
  await finished;
  rl.close();
}

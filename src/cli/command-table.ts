/**
 * Every command of the CLI: its summary and examples for help, and a loader
 * for its citty definition (one lazily loaded file per command). The CLI
 * (app.ts), the shell completions and the generated command reference all
 * read this one table.
 */

import type { CommandDef } from "citty";
import type { CommandHelp } from "./help.ts";

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each command has its own args type
export type Loader = () => Promise<CommandDef<any>>;

export const COMMANDS: Record<string, CommandHelp & { load: Loader }> = {
  run: {
    summary: "run a workflow file, or a builtin by name",
    examples: ["atomic run ./review.ts --input dir=src --input depth=3", "atomic run ./review.ts --detach", "atomic run fan-out-and-synthesize --input prompt=\"Review src/ for bugs\"", "atomic run triage --inputs-json inputs.json --max-cost 2", "atomic run ./review.ts --id review-2026-12-01 --input dir=src", "atomic run ./review.ts --json | jq -c 'select(.type == \"result\")'"],
    load: () => import("./commands/run.ts").then((m) => m.default),
  },
  resume: {
    summary: "continue an interrupted, crashed or failed run",
    examples: ["atomic resume 01m8rf", "atomic resume 01m8rf --max-cost 5", "atomic resume 01m8rf --max-cost 5 --detach"],
    load: () => import("./commands/resume.ts").then((m) => m.default),
  },
  rerun: {
    summary: "start a new run of a run's workflow with its inputs (--input overrides)",
    examples: ["atomic rerun 01m8rf", "atomic rerun 01m8rf --input depth=3"],
    load: () => import("./commands/rerun.ts").then((m) => m.default),
  },
  fork: {
    summary: "start a new run that reuses a run's results up to a step and runs the rest",
    examples: ["atomic fork 01m8rf --at review", "atomic fork 01m8rf --at '#4'"],
    load: () => import("./commands/fork.ts").then((m) => m.default),
  },
  worker: {
    summary: "run stages of any run from a shared Postgres journal on this machine (a worker host)",
    examples: ["atomic worker --journal postgres://atomic@db:5432/atomic", "atomic worker --journal postgres://atomic@db/atomic --slots 8 --queues default,gpu --workdir /srv/checkout"],
    load: () => import("./commands/worker.ts").then((m) => m.default),
  },
  workers: {
    summary: "list worker hosts of a shared Postgres journal and what their workers run",
    examples: ["atomic workers --journal postgres://atomic@db:5432/atomic", "atomic workers --all --json | jq -c 'select(.state == \"lost\")'"],
    load: () => import("./commands/workers.ts").then((m) => m.default),
  },
  test: {
    summary: "run workflow tests (*.test.ts) with Bun's test runner and atomic/testing, nothing to install",
    examples: ["atomic test", "atomic test review.test.ts", "atomic test tests/ -t crash"],
    load: () => import("./commands/test.ts").then((m) => m.default),
  },
  export: {
    summary: "write a run's journal as a portable JSON file (stdout), for atomic replay",
    examples: ["atomic export 01m8rf > run.json"],
    load: () => import("./commands/export.ts").then((m) => m.default),
  },
  replay: {
    summary: "replay recorded runs (ids or exported files) against the current code; report the first divergence of each",
    examples: ["atomic replay run.json", "atomic replay 01m8rf 01m8rg --workflow ./review.ts", "atomic replay runs/*.json --workflow ./review.ts --json"],
    load: () => import("./commands/replay.ts").then((m) => m.default),
  },
  gc: {
    summary: "delete old finished runs and their artifacts; shrink the journal",
    examples: ["atomic gc --dry-run", "atomic gc --older-than 7d", "atomic gc --older-than 90d --status failed,crashed --force"],
    load: () => import("./commands/gc.ts").then((m) => m.default),
  },
  runs: {
    summary: "list runs",
    examples: ["atomic runs", "atomic runs --status crashed,failed --since 2h", "atomic runs --workflow review --json"],
    load: () => import("./commands/runs.ts").then((m) => m.default),
  },
  usage: {
    summary: "tokens and cost over runs, by workflow, stage, model, runner or day",
    examples: ["atomic usage", "atomic usage --by model --since 7d", "atomic usage --by day --json"],
    load: () => import("./commands/usage.ts").then((m) => m.default),
  },
  show: {
    summary: "show a run: stages, outputs, errors, timings",
    examples: ["atomic show 01m8rf", "atomic show 01m8rf --json | jq .run.outputs"],
    load: () => import("./commands/show.ts").then((m) => m.default),
  },
  logs: {
    summary: "print a run's stage output (--follow to keep reading)",
    examples: ["atomic logs 01m8rf --stage list", "atomic logs 01m8rf --follow", "atomic logs 01m8rf --stage summarize/report --no-stderr"],
    load: () => import("./commands/logs.ts").then((m) => m.default),
  },
  tui: {
    summary: "the full-screen terminal console: runs, stage trees, conversations, questions answered inline",
    examples: ["atomic tui", "atomic tui --status running", "atomic tui 01m8rf", "atomic run ./review.ts --tui"],
    load: () => import("./commands/tui.ts").then((m) => m.default),
  },
  pause: { summary: "pause a live run (no new step starts), or one stage of it", examples: ["atomic pause 01m8rf", "atomic pause 01m8rf review/security"], load: () => import("./commands/pause.ts").then((m) => m.default) },
  unpause: { summary: "let a paused run, or a paused stage, go on", examples: ["atomic unpause 01m8rf", "atomic unpause 01m8rf review/security"], load: () => import("./commands/unpause.ts").then((m) => m.default) },
  cancel: { summary: "cancel a run (live or not)", examples: ["atomic cancel 01m8rf", "atomic cancel 01m8rf --wait 60"], load: () => import("./commands/cancel.ts").then((m) => m.default) },
  attach: {
    summary: "sit with a running stage: its conversation, live, and a line to steer it",
    examples: ["atomic attach 01m8rf review", "atomic attach 01m8rf", "atomic attach 01m8rf review --json | jq -c 'select(.type == \"text\")'"],
    load: () => import("./commands/attach.ts").then((m) => m.default),
  },
  token: {
    summary: "mint a read-only token for one run's status API and event streams",
    examples: ["atomic token --run 01m8rf --read-only --ttl 1h"],
    load: () => import("./commands/token.ts").then((m) => m.default),
  },
  send: {
    summary: "send a message to a stage (live now, or before it starts)",
    examples: ['atomic send 01m8rf review "focus on the tests"', 'atomic send 01m8rf "review/*" "stop and summarize" --mode interrupt', 'atomic send 01m8rf review "match this layout" --attach mock.png --attach notes.md'],
    load: () => import("./commands/send.ts").then((m) => m.default),
  },
  answer: { summary: "answer a question a run asked (ctx.ask)", examples: ["atomic answer 01m8rf q2rgm5mf yes"], load: () => import("./commands/answer.ts").then((m) => m.default) },
  diff: {
    summary: "print the diff of a stage's git worktree against its base (workspace: \"worktree\")",
    examples: ["atomic diff 01m8rf fix", "atomic diff 01m8rf fix --stat"],
    load: () => import("./commands/diff.ts").then((m) => m.default),
  },
  review: {
    summary: "approve or comment on a stage's diff that a run waits to have reviewed (ctx.review)",
    examples: ["atomic review 01m8rf fix --approve", "atomic review 01m8rf fix --comment src/app.ts:12 \"handle the empty list\""],
    load: () => import("./commands/review.ts").then((m) => m.default),
  },
  inbox: { summary: "list a run's messages per stage and its questions", examples: ["atomic inbox 01m8rf"], load: () => import("./commands/inbox.ts").then((m) => m.default) },
  sessions: { summary: "list intercom sessions: live runs and their running stages", examples: ["atomic sessions", "atomic sessions --run 01m8rf"], load: () => import("./commands/sessions.ts").then((m) => m.default) },
  mcp: {
    summary: "an MCP server over stdio for agents that operate atomic (runs, workflows, transcripts, messages, control)",
    examples: ["atomic mcp", "claude mcp add atomic -- atomic mcp"],
    load: () => import("./commands/mcp.ts").then((m) => m.default),
  },
  serve: {
    summary: "the local service: the status page and API, and runs recovered and woken by themselves",
    examples: ["atomic serve", "atomic serve --port 8080 --open", "atomic serve --max-runs 8", "atomic serve --no-recover", "atomic serve --no-schedules"],
    load: () => import("./commands/serve.ts").then((m) => m.default),
  },
  schedule: {
    summary: "add, list, show, pause, unpause, trigger or delete schedules (atomic serve runs them)",
    examples: [
      'atomic schedule add nightly --cron "0 9 * * 1-5" --tz Europe/Berlin ./review.ts --input dir=src',
      "atomic schedule list",
      "atomic schedule trigger nightly",
      "atomic schedule pause nightly",
    ],
    load: () => import("./commands/schedule.ts").then((m) => m.default),
  },
  workflows: {
    summary: "list workflows in .atomic/workflows/ and the builtins (or one's inputs and outputs)",
    examples: ["atomic workflows", "atomic workflows --inputs ./review.ts", "atomic workflows loop-until-done --source"],
    load: () => import("./commands/workflows.ts").then((m) => m.default),
  },
  init: {
    summary: "set up a project: the SDK's types, a tsconfig.json and an example workflow",
    examples: ["atomic init", "atomic init my-workflows"],
    load: () => import("./commands/init.ts").then((m) => m.default),
  },
  check: {
    summary: "type-check workflow files with the compiler in the binary and check each is a workflow",
    examples: ["atomic check .atomic/workflows/summarize.ts", "atomic check .atomic/workflows/*.ts"],
    load: () => import("./commands/check.ts").then((m) => m.default),
  },
  types: {
    summary: "rewrite .atomic/types/atomic.d.ts with this atomic's SDK declarations (after an upgrade)",
    examples: ["atomic types"],
    load: () => import("./commands/types.ts").then((m) => m.default),
  },
  doctor: { summary: "say which runners (agents) are usable here and why not", examples: ["atomic doctor", "atomic doctor --check-endpoint"], load: () => import("./commands/doctor.ts").then((m) => m.default) },
  version: { summary: "print the version", examples: ["atomic version", "atomic --version --json"], load: () => import("./commands/version.ts").then((m) => m.default) },
  completion: {
    summary: "print a shell completion script (bash, zsh or fish)",
    examples: ["atomic completion bash > ~/.local/share/bash-completion/completions/atomic", "atomic completion zsh > ~/.zfunc/_atomic", "atomic completion fish > ~/.config/fish/completions/atomic.fish"],
    // Completion describes every command of this table, itself too: it is handed the table, and never imports it.
    load: () => import("./commands/completion.ts").then((m) => m.completionCommand(COMMANDS)),
  },
};


/**
 * The prompt through stdin (CliAdapter.promptOnStdin), for CLIs that read
 * it there: a prompt far above the ~128 KiB limit of one argv element
 * reaches the agent whole, and argv does not carry it. A CLI that says it
 * lost that prompt (CliAdapter.lostPrompt, gemini's exit 42 when it came
 * late to the pipe) is started again without the session it opened, three
 * starts in all.
 */

import { afterEach, expect, test } from "bun:test";
import { chmodSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CliAgentRunner, type CliAdapter } from "../../src/runners/cli-agents/cli-runner.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

afterEach(removeTempDirs);

const adapter: CliAdapter = {
  kind: "stdin-agent",
  delivery: "resume",
  assignsSession: false,
  nativeSchema: false,
  credentials: [],
  promptOnStdin: true,
  args: () => ["--json"],
  onRecord(rec, ctx) {
    if (rec.type !== "done") return;
    ctx.state.text = String(rec.text);
    ctx.state.final = { ok: true };
    return true;
  },
};

test("a 300 KiB prompt is written to the agent's stdin, not put in argv", async () => {
  const dir = makeTempDir("atomic-stdin-agent-");
  const bin = join(dir, "agent");
  // Reads stdin to its end, keeps it and its argv, answers with the byte count.
  writeFileSync(bin, `#!/bin/sh\ncat > ${dir}/stdin\necho "$@" > ${dir}/argv\nprintf '{"type":"done","text":"%s"}\\n' "$(wc -c < ${dir}/stdin | tr -d ' ')"\n`);
  chmodSync(bin, 0o755);
  const prompt = `BEGIN ${"y".repeat(300 * 1024)} END`;
  const handle = new CliAgentRunner(adapter).start(
    { runId: "r", stageKey: "0", stageName: "big", attempt: 1, runner: "stdin-agent", prompt, cwd: dir, artifactDir: join(dir, "artifacts"), agent: { binary: bin } },
    () => {},
  );
  const r = await handle.result;
  expect(r.status).toBe("completed");
  expect(r.text).toBe(String(Buffer.byteLength(prompt)));
  expect(readFileSync(join(dir, "stdin"), "utf8")).toBe(prompt);
  expect(readFileSync(join(dir, "argv"), "utf8").trim()).toBe("--json");
});

/**
 * A CLI that loses its piped prompt in its first `losses` starts as gemini 0.61 does: it opens the session of the id
 * it was given first (refusing an id it has, as gemini does), then exits 42 without reading stdin.
 */
function losingAgent(dir: string, losses: number): CliAdapter {
  const bin = join(dir, "agent");
  writeFileSync(
    bin,
    `#!/bin/sh
echo start >> ${dir}/starts
[ -e ${dir}/session-$2 ] && { echo "Session ID $2 already exists" >&2; exit 42; }
: > ${dir}/session-$2
if [ "$(wc -l < ${dir}/starts)" -le ${losses} ]; then echo "No input provided via stdin. Input can be provided by piping data" >&2; exit 42; fi
printf '{"type":"done","text":"%s"}\\n' "$(cat)"
`,
  );
  chmodSync(bin, 0o755);
  return {
    ...adapter,
    assignsSession: true,
    args: (_req, a) => ["--session-id", a.sessionId!],
    lostPrompt: { code: 42, stderr: /No input provided via stdin/ },
    sessionStore: { root: () => dir, find: (_root, _req, id) => (existsSync(join(dir, `session-${id}`)) ? `session-${id}` : undefined), place: (_root, _req, id) => `session-${id}` },
  };
}

function runLosing(dir: string, losses: number) {
  const req = { runId: "r", stageKey: "0", stageName: "lost", attempt: 1, runner: "stdin-agent", prompt: "the prompt", cwd: dir, artifactDir: join(dir, "artifacts"), agent: { binary: join(dir, "agent") } };
  return new CliAgentRunner(losingAgent(dir, losses)).start(req, () => {}).result;
}

const starts = (dir: string) => readFileSync(join(dir, "starts"), "utf8").trim().split("\n").length;

test("a CLI that lost the prompt on its stdin is started again without the session it opened; the transcript says so", async () => {
  const dir = makeTempDir("atomic-lost-prompt-");
  const r = await runLosing(dir, 2);
  expect(r.error).toBeUndefined();
  expect(r.status).toBe("completed");
  expect(r.text).toBe("the prompt");
  expect(starts(dir)).toBe(3);
  expect(readFileSync(join(dir, "artifacts", "transcript.md"), "utf8").split("(stdin-agent read no prompt from its stdin: started again)").length).toBe(3);
});

test("a CLI that loses the prompt on its stdin three times: the stage fails saying so, with a hint", async () => {
  const dir = makeTempDir("atomic-lost-prompt-");
  const r = await runLosing(dir, 10);
  expect(r.status).toBe("failed");
  expect(r.error).toEqual({ code: "agent_failed", message: "stdin-agent read no prompt from its stdin 3 times (No input provided via stdin): the machine is too busy for it to read the pipe in time; run the stage again when it is quieter" });
  expect(starts(dir)).toBe(3);
});

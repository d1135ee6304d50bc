/**
 * The prompt through stdin (CliAdapter.promptOnStdin), for CLIs that read
 * it there: a prompt far above the ~128 KiB limit of one argv element
 * reaches the agent whole, and argv does not carry it.
 */

import { afterEach, expect, test } from "bun:test";
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
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

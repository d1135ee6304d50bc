/**
 * The SDK's stage options through dist/atomic with the openai runner
 * against the fake server: `continueFrom` (the continued stage's request
 * carries the earlier conversation; a fork is a copy the earlier stage
 * keeps unchanged; a chain of continuations carries all of it), `reads`
 * (files attached under their paths, cut at the per-file bound; a
 * missing one fails the step before the stage, naming the path),
 * `output: "file"` (the answer in the attempt's output.md, the result
 * carrying the path and no text), continueFrom of a shell stage refused;
 * a continuing stage inherits the earlier one's runner, model and cwd.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, type RecordedRequest } from "../helpers/fake-openai.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, STACK_LINE } from "../e2e/support.ts";

const WORKFLOW = join(import.meta.dir, "fixtures", "sessions.ts");
afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const lastUser = (r: RecordedRequest) => r.body.messages.filter((m) => m.role === "user").at(-1)!.content ?? "";
const ANSWERS: Record<string, string> = {
  "Remember the number 42.": "noted: 42",
  "Which number did I give you?": "you gave 42",
  "Forget it; say bye.": "bye",
  "And once more?": "still 42",
  "Write the report.": "# The report\nall good\n",
};

async function withServer(fn: (env: Record<string, string>, requests: RecordedRequest[]) => Promise<void>) {
  const server = await startFakeOpenAI((req) => {
    const ask = lastUser(req);
    return text(ANSWERS[ask] ?? (ask.startsWith("Summarize the notes.") ? "summary" : `unexpected: ${ask.slice(0, 40)}`));
  });
  try {
    await fn({ ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test", ATOMIC_MODEL: "fake-model" }, server.requests);
  } finally {
    await server.close();
  }
}

e2eTest("continueFrom replays the earlier conversation (fork: a copy), reads attaches bounded files with their paths, output: file keeps the path", async () => {
  await withServer(async (env, requests) => {
    const home = makeTempDir("atomic-sdk-home-");
    const cwd = makeTempDir("atomic-sdk-cwd-");
    writeFileSync(join(cwd, "notes.md"), "the notes\n");
    writeFileSync(join(cwd, "big.txt"), "x".repeat(70 * 1024));
    const r = await runAtomic(["run", WORKFLOW, "--json", "--workers", "1"], { home, cwd, env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
    expect(out.texts).toEqual(["noted: 42", "you gave 42", "bye", "still 42"]);
    const convo = (r: RecordedRequest) => r.body.messages.filter((m) => m.role !== "system").map((m) => `${m.role}: ${m.content}`);
    const byAsk = (ask: string) => requests.find((q) => lastUser(q) === ask)!;
    expect(convo(byAsk("Which number did I give you?"))).toEqual(["user: Remember the number 42.", "assistant: noted: 42", "user: Which number did I give you?"]);
    // the fork starts from the first stage's conversation, not the second's
    expect(convo(byAsk("Forget it; say bye."))).toEqual(["user: Remember the number 42.", "assistant: noted: 42", "user: Forget it; say bye."]);
    // a continuation of a continuation carries the whole chain, without the fork
    expect(convo(byAsk("And once more?"))).toEqual([
      "user: Remember the number 42.",
      "assistant: noted: 42",
      "user: Which number did I give you?",
      "assistant: you gave 42",
      "user: And once more?",
    ]);
    // one system message each: the continuing stage's own
    expect(byAsk("And once more?").body.messages.filter((m) => m.role === "system").length).toBe(1);

    const read = lastUser(requests.find((q) => lastUser(q).startsWith("Summarize the notes."))!);
    expect(read).toStartWith("Summarize the notes.\n\nAttached files (2): notes.md, big.txt\n\n");
    expect(read).toContain('<file path="notes.md">\nthe notes\n\n</file>');
    expect(read).toContain(`<file path="big.txt">\n${"x".repeat(64 * 1024)}\n(cut: ${6 * 1024} of ${70 * 1024} bytes left out)\n</file>`);

    expect(out.filed.text).toBe("");
    expect(out.filed.path).toMatch(/\/attempt-1\/output\.md$/);
    expect(out.filed.content).toBe("# The report\nall good\n");
    // a shell stage in file mode: its stdout stays in stdout.log, the text is left out
    expect(out.listed).toEqual({ text: "", path: expect.stringMatching(/\/attempt-1\/stdout\.log$/), content: "one\ntwo\n" });
    // an artifact like the others: private to the user, as the conversation each openai stage leaves
    expect(statSync(out.filed.path).mode & 0o077).toBe(0);
    expect(statSync(join(dirname(out.filed.path), "conversation.json")).mode & 0o077).toBe(0);
  });
}, 120_000);

e2eTest("a missing reads file and continueFrom of a shell stage fail the step before the stage, in one sentence", async () => {
  await withServer(async (env, requests) => {
    const home = makeTempDir("atomic-sdk-home-");
    const cwd = makeTempDir("atomic-sdk-cwd-");
    writeFileSync(join(cwd, "notes.md"), "the notes\n");
    const missing = await runAtomic(["run", WORKFLOW, "--input", "bad=missing-read", "--workers", "1"], { home, cwd, env });
    expect(missing.code).toBe(1);
    // The sentence may say where in the workflow the call was (" (at file:line:col)").
    expect(missing.stderr).toMatch(/failed: stage "reader": reads: cannot read nowhere\.md: no such file( \(at [^)]+\))?\nhint: create the file before the stage, or leave it out of reads\n/);
    expect(missing.stderr).not.toMatch(STACK_LINE);
    const shell = await runAtomic(["run", WORKFLOW, "--input", "bad=shell-continue", "--workers", "1"], { home, cwd, env });
    expect(shell.code).toBe(1);
    expect(shell.stderr).toMatch(/failed: stage "next": continueFrom needs the result of an earlier agent stage \(it has no transcript\)( \(at [^)]+\))?\nhint: pass what ctx\.task returned for an agent stage\n/);
    expect(shell.stderr).not.toMatch(STACK_LINE);
    expect(requests.length).toBe(0);
  });
});

e2eTest("continueFrom and fork inherit the earlier stage's runner, model and cwd; another runner is refused naming both", async () => {
  await withServer(async (env, requests) => {
    const home = makeTempDir("atomic-sdk-home-");
    const cwd = makeTempDir("atomic-sdk-cwd-");
    mkdirSync(join(cwd, "sub"));
    const inherit = join(import.meta.dir, "fixtures", "inherit.ts");
    const r = await runAtomic(["run", inherit, "--json"], { home, cwd, env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
    expect(out.texts).toEqual(["noted: 42", "you gave 42", "bye"]);
    expect(out.ran).toEqual(["openai", "first-model", "sub", "openai", "first-model", "sub"]);
    // the workflow's default runner (shell) and the config's model were not used: every request went to the first stage's model
    expect(requests.map((q) => q.body.model)).toEqual(["first-model", "first-model", "first-model"]);
    const count = requests.length;
    const bad = await runAtomic(["run", inherit, "--input", "bad=true"], { home, cwd, env });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(
      /failed: stage "other": continueFrom: the earlier stage ran on the openai runner, this one asks for claude; a session continues only on its own runner( \(at [^)]+inherit\.ts:10:\d+\))?\nhint: leave runner out \(it runs on openai\), or start a new session without continueFrom\n/,
    );
    expect(bad.stderr).not.toMatch(STACK_LINE);
    expect(requests.length).toBe(count + 1);
  });
});

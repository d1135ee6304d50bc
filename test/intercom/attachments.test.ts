/**
 * `atomic send RUN STAGE TEXT --attach FILE…` through the real binary: the
 * files are copied into the run's artifacts and reach an openai stage that
 * had not started yet in its first model request (a text file's contents,
 * a binary file named by its copy). Bad input, each one sentence and a hint
 * with exit 2 and nothing recorded or left behind: a missing file, a
 * directory, a file over the configured cap (artifacts.maxAttachmentBytes),
 * a message to a stage that cannot exist (its copies removed).
 */

import { afterEach, expect, test } from "bun:test";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { expectOneSentenceError, startedRunId } from "../e2e/support.ts";
import { cleanupHomes, newHome } from "./support.ts";
import { inOrder, startFakeOpenAI, text } from "../helpers/fake-openai.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "delivery-states.ts");

afterEach(async () => {
  await killSpawned();
  await cleanupHomes();
});

test("attachments reach an openai stage as reads: copied into the run's artifacts, text inlined, binary named; bad files refused with nothing recorded", async () => {
  const home = newHome();
  const out = join(home, "out");
  const files = join(home, "files");
  Bun.spawnSync(["mkdir", "-p", out, files]);
  writeFileSync(join(files, "notes.md"), "# Notes\nthe header must be blue\n");
  writeFileSync(join(files, "mock.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]));
  writeFileSync(join(files, "big.txt"), "x".repeat(4096));
  writeFileSync(join(home, "config.json"), JSON.stringify({ artifacts: { maxAttachmentBytes: 1024 } }));
  const gate = join(home, "gate");
  const server = await startFakeOpenAI(inOrder(text("done")));
  try {
    const env = { GATE_FILE: gate, OUT_DIR: out, ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const cli = (args: string[]) => runAtomic(args, { home, env, cwd: files });
    const proc = spawnAtomic(["run", FIXTURE, "--workers", "1"], { home, env });
    const lines = lineWatcher(proc.stdout);
    const id = startedRunId(await lines.waitFor(/^started run /));
    await lines.waitFor(/stage gate started/);

    for (const [file, message, hint] of [
      ["missing.md", "cannot attach missing.md: no such file.", "check the path"],
      [".", "cannot attach .: it is a directory.", "attach its files one by one"],
      ["big.txt", "cannot attach big.txt: it is 4.0 KiB, more than the attachment cap of 1.0 KiB.", "raise artifacts.maxAttachmentBytes"],
    ] as const) {
      const r = await cli(["send", id, "agent", "look", "--attach", "notes.md", "--attach", file]);
      expect(r.code).toBe(2);
      const err = expectOneSentenceError(r.stderr);
      expect(err.message).toBe(message);
      expect(err.hint).toContain(hint);
    }
    // A stage that cannot exist: refused after the copies were made, and they are gone.
    const typo = await cli(["send", id, "agnet", "look", "--attach", "notes.md"]);
    expect(typo.code).toBe(2);
    expect(existsSync(join(home, "artifacts", id, "attachments")) ? readdirSync(join(home, "artifacts", id, "attachments")) : []).toEqual([]);
    expect((await cli(["inbox", id, "--json"])).stdout).not.toContain("look");

    const sent = await cli(["send", id, "agent", "match this", "--attach", "notes.md", "--attach", "mock.png", "--json"]);
    expect(sent.code).toBe(0);
    const receipt = JSON.parse(sent.stdout) as { messageId: string; attachments: string[]; attachmentsDir: string };
    expect(receipt.attachments).toEqual(["notes.md", "mock.png"]);
    expect(receipt.attachmentsDir).toBe(join(home, "artifacts", id, "attachments", receipt.messageId));
    const copy = (name: string) => readFileSync(join(receipt.attachmentsDir, name));
    expect(copy("notes.md").equals(readFileSync(join(files, "notes.md")))).toBe(true);
    expect(copy("mock.png").equals(readFileSync(join(files, "mock.png")))).toBe(true);

    // The fixture's shell stage reads a line of its stdin.
    expect((await cli(["send", id, "flaky", "hi"])).code).toBe(0);
    writeFileSync(gate, "");
    expect(await proc.exited).toBe(0);
    const request = JSON.stringify(server.requests[0]!.body.messages);
    expect(request).toContain("match this");
    expect(request).toContain(`<file path=\\"${join(receipt.attachmentsDir, "notes.md")}\\">\\n# Notes\\nthe header must be blue\\n`);
    expect(request).toContain(`(binary: read it from ${join(receipt.attachmentsDir, "mock.png")})`);
    // The message as recorded and received.
    const box = JSON.parse((await cli(["inbox", id, "--json"])).stdout) as { stages: { stage: string; messages: { id: string; state: string }[] }[] };
    expect(box.stages.find((s) => s.stage === "agent")?.messages).toMatchObject([{ id: receipt.messageId, state: "received" }]);
  } finally {
    await server.close();
  }
}, 120_000);

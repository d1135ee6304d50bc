/**
 * The status server and `atomic logs` against hostile input, through the
 * real binary:
 *
 * - a stage that replaced its stdout.log (or its attempt directory) with a
 *   symbolic link to a file outside: neither the transcript route nor
 *   `atomic logs` shows that file, both answer one `unsafe_artifact` error;
 * - a request without a Host header (raw TCP, HTTP/1.0) gets 400 JSON, not
 *   Bun's error page with source lines;
 * - request bodies over 64 KiB get 413 with the JSON error shape (a message's
 *   over its attachment cap in base64 and 64 KiB, in its own sentence), by
 *   Content-Length and when chunked, and the server keeps serving.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, makeTempDir } from "../e2e/support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const LEAK = join(import.meta.dir, "fixtures", "leak.ts");
const SECRET = "top-secret-content-of-another-file";

async function startServe(home: string) {
  const proc = spawnAtomic(["serve", "--port", "0"], { home });
  const out = lineWatcher(proc.stdout);
  const login = (await out.waitFor(/^status page: /)).slice("status page: ".length).trim();
  const m = /^http:\/\/127\.0\.0\.1:(\d+)\/\?token=([0-9a-f]{64})$/.exec(login)!;
  return { proc, port: Number(m[1]), token: m[2]!, url: `http://127.0.0.1:${m[1]}/` };
}

/** Writes `text` (and then each of `more`) on a fresh connection; the whole answer once the server closes it. */
function rawHttp(port: number, text: string, more: string[] = []): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = "";
    const sock = connect(port, "127.0.0.1", () => {
      sock.write(text);
      for (const m of more) sock.write(m);
    });
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no end of the answer; got ${JSON.stringify(out.slice(0, 300))}`));
    }, 20_000);
    sock.on("data", (d) => (out += d.toString()));
    sock.on("error", () => {}); // a reset after the answer (the unread rest of a body) is fine
    sock.on("close", () => {
      clearTimeout(timer);
      resolve(out);
    });
  });
}

function bodyOf(answer: string): Record<string, any> {
  return JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4)) as Record<string, any>;
}

for (const mode of ["file", "dir"] as const) {
  e2eTest(`a stage's planted link (${mode}) is neither served by the page nor printed by atomic logs`, async () => {
    const home = makeTempDir();
    const outside = makeTempDir();
    let target = join(outside, "secret.txt");
    writeFileSync(target, `${SECRET}\n`);
    if (mode === "dir") {
      target = join(outside, "fake-attempt");
      mkdirSync(target);
      writeFileSync(join(target, "stdout.log"), `${SECRET}\n`);
    }
    const run = await runAtomic(["run", LEAK, "--input", `home=${home}`, "--input", `target=${target}`, "--input", `mode=${mode}`, "--json"], { home });
    expect(run.code).toBe(0);
    const runId = /"runId":"([0-9a-z]{18})"/.exec(run.stdout)![1]!;

    const logs = await runAtomic(["logs", runId], { home });
    expect(logs.stdout + logs.stderr).not.toContain(SECRET);
    expect(logs.code).toBe(2);
    const e = expectOneSentenceError(logs.stderr);
    expect(e.message).toContain("symbolic link");

    const { proc, url, token } = await startServe(home);
    try {
      const res = await fetch(`${url}api/runs/${runId}/stages/plant/transcript`, { headers: { authorization: `Bearer ${token}` } });
      const text = await res.text();
      expect(text).not.toContain(SECRET);
      expect(res.status).toBe(403);
      expect(JSON.parse(text)).toMatchObject({ error: { code: "unsafe_artifact", message: expect.stringContaining("symbolic link") } });
    } finally {
      proc.kill("SIGINT");
      await proc.exited;
    }
  });
}

e2eTest("a request without a Host header gets 400 JSON; bodies over 64 KiB get 413 JSON, by length and chunked", async () => {
  const home = makeTempDir();
  const done = await runAtomic(["run", join(import.meta.dir, "fixtures", "pipeline.ts"), "--input", "pause=0", "--json"], { home });
  expect(done.code).toBe(0);
  const runId = /"runId":"([0-9a-z]{18})"/.exec(done.stdout)![1]!;
  const { proc, port, token, url } = await startServe(home);
  try {
    const noHost = await rawHttp(port, "GET /api/runs HTTP/1.0\r\n\r\n");
    expect(noHost).toStartWith("HTTP/1.1 400");
    expect(noHost).not.toContain("source_lines");
    expect(bodyOf(noHost)).toMatchObject({ error: { code: "missing_host" } });
    const noHostHealth = await rawHttp(port, "GET /healthz HTTP/1.0\r\n\r\n");
    expect(noHostHealth).toStartWith("HTTP/1.1 400");

    const head = `POST /api/runs/${runId}/control HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\n`;
    // declared too large: refused before the body is read (none of it is sent: unread bytes would reset the connection)
    const byLength = await rawHttp(port, `${head}Content-Length: ${10 * 1024 * 1024}\r\n\r\n`);
    expect(byLength).toStartWith("HTTP/1.1 413");
    expect(bodyOf(byLength)).toMatchObject({ error: { code: "body_too_large", message: expect.stringContaining("64 KiB") } });
    // chunked: refused once more than 64 KiB arrived (64 KiB and one byte are sent, and no end of the body)
    const chunk = `${(8192).toString(16)}\r\n${"x".repeat(8192)}\r\n`;
    const chunked = await rawHttp(port, `${head}Transfer-Encoding: chunked\r\n\r\n`, [...Array.from({ length: 8 }, () => chunk), "1\r\nx\r\n"]);
    expect(chunked).toStartWith("HTTP/1.1 413");
    expect(bodyOf(chunked)).toMatchObject({ error: { code: "body_too_large" } });
    // a message's body may hold an attachment at the cap (artifacts.maxAttachmentBytes, 10 MiB) in base64: past that, its own sentence
    const message = await rawHttp(port, `${head.replace("/control", "/messages")}Content-Length: ${20 * 1024 * 1024}\r\n\r\n`);
    expect(message).toStartWith("HTTP/1.1 413");
    expect(bodyOf(message)).toMatchObject({
      error: { code: "body_too_large", message: expect.stringMatching(/^the message and its attachments are over 13\.4 MiB \(the attachment cap of 10(\.0)? MiB, in base64, and the text\)$/), hint: expect.stringContaining("artifacts.maxAttachmentBytes") },
    });
    const padded70 = JSON.stringify({ stage: "nope", text: "x".repeat(70 * 1024) });
    const read = await fetch(`${url}api/runs/${runId}/messages`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: padded70 });
    expect(read.status).not.toBe(413);
    // just under the cap is read and judged on its content (a finished run cannot be paused)
    const padded = JSON.stringify({ action: "pause", pad: "x".repeat(60 * 1024) });
    const ok = await fetch(`${url}api/runs/${runId}/control`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: padded });
    expect(ok.status).toBe(409);
    // still serving
    expect((await fetch(`${url}healthz`)).status).toBe(200);
  } finally {
    proc.kill("SIGINT");
    await proc.exited;
  }
});

/**
 * `atomic token --run ID --read-only --ttl DURATION` through the real binary: the token reads its run's API and
 * streams on `atomic serve`, and is refused for another run, the run list, metrics, and every post; a token
 * changed to name another run, an expired one and bad flags are refused.
 */

import { afterAll, afterEach, expect, test } from "bun:test";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { inOrder, startFakeOpenAI, text } from "../helpers/fake-openai.ts";
import { checkRunToken, mintRunToken } from "../../src/status/run-tokens.ts";
import { get, serve, startChat } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await killSpawned();
  await cleanupNow();
});

e2eTest("a run-scoped read-only token reads its run and nothing else", async () => {
  const fake = await startFakeOpenAI(inOrder(text("done")));
  const home = makeTempDir("atomic-token-home-");
  const env = { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
  try {
    const a = await startChat(home, env, ["--in-process"]);
    expect(await a.proc.exited).toBe(0);
    const b = await startChat(home, env, ["--in-process"]);
    expect(await b.proc.exited).toBe(0);
    const minted = await runAtomic(["token", "--run", a.runId, "--read-only", "--ttl", "1h"], { home, env });
    expect(minted.code).toBe(0);
    const token = minted.stdout.trim();
    expect(token).toMatch(/^atr1\./);
    expect(minted.stderr).toContain(`reads run ${a.runId}`);
    const served = await serve(home);
    const as = (path: string, init: RequestInit = {}) => fetch(new URL(path, served.url), { ...init, headers: { Authorization: `Bearer ${token}`, ...(init.headers ?? {}) } });
    expect((await as(`/api/runs/${a.runId}`)).status).toBe(200);
    expect((await as(`/api/runs/${a.runId}/events`)).status).toBe(200);
    expect((await as(`/api/runs/${a.runId}/stages/chat/transcript`)).status).toBe(200);
    const stream = await as(`/api/runs/${a.runId}/stages/chat/stream`);
    expect(stream.status).toBe(200);
    await stream.body!.cancel();
    for (const path of [`/api/runs/${b.runId}`, `/api/runs/${b.runId}/stream`, "/api/runs", "/metrics", "/api/service", "/"]) {
      const res = await as(path);
      expect(res.status).toBe(403);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("run_token_scope");
    }
    for (const [path, body] of [
      [`/api/runs/${a.runId}/messages`, { stage: "chat", text: "hi" }],
      [`/api/runs/${a.runId}/control`, { action: "cancel" }],
      ["/api/runs", { workflow: "x" }],
    ] as const) {
      const res = await as(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      expect(res.status).toBe(403);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("read_only_token");
    }
    // Changed to name the other run: its signature no longer holds.
    const forged = token.replace(a.runId, b.runId);
    const res = await get(served, `/api/runs/${b.runId}`, {}, forged);
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("wrong_token");
    served.proc.kill("SIGTERM");
    await served.proc.exited;

    const noFlag = await runAtomic(["token", "--run", a.runId], { home, env });
    expect(noFlag.code).toBe(2);
    expect(noFlag.stderr).toContain("--read-only");
    const badTtl = await runAtomic(["token", "--run", a.runId, "--read-only", "--ttl", "forever"], { home, env });
    expect(badTtl.code).toBe(2);
    expect(badTtl.stderr).toContain("--ttl must be a duration");
  } finally {
    await fake.close();
  }
});

test("a run token expires, and only the server's own secret signs it", () => {
  const { token, expiresAt } = mintRunToken("secret-a", "01m8rfabcdefabcdef", 60_000, 1_000);
  expect(checkRunToken("secret-a", token, expiresAt - 1)).toEqual({ rootId: "01m8rfabcdefabcdef" });
  expect(checkRunToken("secret-a", token, expiresAt)).toEqual({ refused: "expired" });
  expect(checkRunToken("secret-b", token, 2_000)).toEqual({ refused: "wrong" });
});

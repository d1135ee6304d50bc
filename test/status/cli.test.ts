/**
 * The status server from the command line, through the real binary:
 * `atomic serve` (URL printed, Ctrl-C stops it cleanly, bad input is one
 * sentence and a hint with exit 2), `atomic run --serve` (the run's page is
 * live while it runs and gets the run's last events before the server
 * goes), and `atomic runs --watch` (plain blocks off a terminal, redrawn in
 * place on one, ends on Ctrl-C).
 */

import { afterAll, afterEach, expect } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, expectOneSentenceError, HAS_SCRIPT, makeTempDir, spawnInPty } from "../e2e/support.ts";
import { sseReader } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const PIPELINE = join(import.meta.dir, "fixtures", "pipeline.ts");

/** Starts `atomic serve` and returns it with the login URL it printed, its clean address and the token. */
async function startServe(home: string, args: string[] = ["--port", "0"]) {
  const proc = spawnAtomic(["serve", ...args], { home });
  const out = lineWatcher(proc.stdout);
  const line = await out.waitFor(/^status page: /);
  const login = line.slice("status page: ".length).trim();
  const m = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login);
  expect(m).not.toBeNull();
  return { proc, out, login, url: m![1]!, token: m![2]! };
}

e2eTest("atomic serve prints its URL, answers, and stops cleanly on Ctrl-C", async () => {
  const home = makeTempDir();
  const done = await runAtomic(["run", PIPELINE, "--input", "pause=0"], { home });
  expect(done.code).toBe(0);
  const { proc, out, url, token } = await startServe(home);
  expect(token).toBe(readFileSync(join(home, "status-token"), "utf8").trim());
  expect((await (await fetch(`${url}healthz`)).json()) as object).toMatchObject({ ok: true });
  const auth = { headers: { authorization: `Bearer ${token}` } };
  expect((await fetch(`${url}api/runs`)).status).toBe(401);
  const runs = (await (await fetch(`${url}api/runs`, auth)).json()) as { total: number; runs: { workflow: string; stages: { total: number } }[] };
  expect(runs.total).toBe(1);
  expect(runs.runs[0]).toMatchObject({ workflow: "pipeline", stages: { total: 6 } });
  expect(await (await fetch(url, auth)).text()).toContain("<title>atomic</title>");
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(0);
  await waitUntil(() => out.ended, 5_000, "stdout to end");
  expect(out.text()).toContain("status server stopped");
  const stderr = await new Response(proc.stderr).text();
  expect(stderr).toBe("");
  await expect(fetch(`${url}healthz`)).rejects.toThrow();
});

e2eTest("atomic serve: a bad --port, a busy port and a foreign --host are one sentence and a hint (exit 2)", async () => {
  const home = makeTempDir();
  for (const port of ["abc", "70000", "-5"]) {
    const r = await runAtomic(["serve", "--port", port], { home });
    expect(r.code).toBe(2);
    const e = expectOneSentenceError(r.stderr);
    expect(e.message).toContain("--port must be a whole number from 0 to 65535");
  }
  const blocker = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("busy") });
  try {
    const r = await runAtomic(["serve", "--port", String(blocker.port)], { home });
    expect(r.code).toBe(2);
    const e = expectOneSentenceError(r.stderr);
    expect(e.message).toBe(`port ${blocker.port} on 127.0.0.1 is already in use.`);
    expect(e.hint).toContain("--port 0");
  } finally {
    blocker.stop(true);
  }
  const foreign = await runAtomic(["serve", "--port", "0", "--host", "192.0.2.1"], { home });
  expect(foreign.code).toBe(2);
  expect(expectOneSentenceError(foreign.stderr).message).toContain("not an address of this machine");
  const stray = await runAtomic(["run", PIPELINE, "--port", "5"], { home });
  expect(stray.code).toBe(2);
  expect(expectOneSentenceError(stray.stderr).message).toContain("--port and --host only go with --serve");
});

e2eTest("atomic serve on every interface warns that other machines may reach it", async () => {
  const home = makeTempDir();
  const proc = spawnAtomic(["serve", "--host", "0.0.0.0", "--port", "0"], { home });
  const err = lineWatcher(proc.stderr);
  const out = lineWatcher(proc.stdout);
  await out.waitFor(/^status page: /);
  expect(await err.waitFor(/^warning: /)).toContain("other machines may reach");
  proc.kill("SIGTERM");
  expect(await proc.exited).toBe(0);
});

e2eTest("atomic run --serve: the run's page is live while it runs and gets its last events", async () => {
  const home = makeTempDir();
  const gate = join(makeTempDir(), "gate");
  const proc = spawnAtomic(["run", PIPELINE, "--serve", "--port", "0", "--input", `gate=${gate}`, "--input", "pause=0"], { home });
  const out = lineWatcher(proc.stdout);
  const line = await out.waitFor(/^status page: /);
  // a login URL for the run's page
  const m = /^status page: (http:\/\/127\.0\.0\.1:\d+\/)runs\/([0-9a-z]{18})\?token=([0-9a-f]{64})$/.exec(line);
  expect(m).not.toBeNull();
  const [, base, runId, token] = m!;
  const auth = { headers: { authorization: `Bearer ${token}` } };
  const fetch = (url: string, init: RequestInit = {}) => globalThis.fetch(url, { ...auth, ...init });
  await waitUntil(async () => {
    const d = (await (await fetch(`${base}api/runs/${runId}`)).json()) as { report: { steps: { name: string; status: string }[] } };
    return d.report.steps.some((s) => s.name === "gate" && s.status === "running");
  }, 30_000, "the gate stage to run");
  const detail = (await (await fetch(`${base}api/runs/${runId}`)).json()) as { run: { status: string } };
  expect(detail.run.status).toBe("running");

  const res = await fetch(`${base}api/runs/${runId}/stream?from=now`);
  const sse = sseReader(res.body!);
  expect((await sse.next())?.event).toBe("ready");
  writeFileSync(gate, "");
  // the stream carries every event up to the run's end, then ends with the server
  const types: string[] = [];
  for (let msg = await sse.next(30_000); msg; msg = await sse.next(30_000)) {
    const d = JSON.parse(msg.data) as { runId: string; type: string; payload: { to?: string } };
    if (d.runId === runId) types.push(d.type === "status_changed" ? `status_changed:${d.payload.to}` : d.type);
  }
  expect(types.at(-1)).toBe("status_changed:completed");
  expect(await proc.exited).toBe(0);
  await expect(fetch(`${base}healthz`)).rejects.toThrow();
});

e2eTest("atomic runs --watch: plain blocks off a terminal, JSON lines with --json, ends on Ctrl-C", async () => {
  const home = makeTempDir();
  const done = await runAtomic(["run", PIPELINE, "--input", "pause=0"], { home });
  expect(done.code).toBe(0);
  const id = /started run ([0-9a-z]{18})/.exec(done.stdout)![1]!;
  const proc = spawnAtomic(["runs", "--watch"], { home });
  const out = lineWatcher(proc.stdout);
  await out.waitFor(/^-- \d\d:\d\d:\d\d \(1 run\(s\)\)$/);
  const row = await out.waitFor(new RegExp(`^${id}\\s`));
  expect(row).toMatch(/\scompleted\s+pipeline\s.*\s6 done\s/);
  expect(out.text()).toMatch(/^RUN\s+STATUS\s+WORKFLOW\s+STARTED\s+DURATION\s+STAGES\s+COST$/m);
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(0);

  const json = spawnAtomic(["runs", "--watch", "--json"], { home });
  const jout = lineWatcher(json.stdout);
  const first = JSON.parse(await jout.waitFor(/^\{/)) as { type: string; total: number; runs: { id: string; stages: { completed: number } }[] };
  expect(first).toMatchObject({ type: "runs", total: 1 });
  expect(first.runs[0]).toMatchObject({ id, stages: { completed: 6 } });
  json.kill("SIGINT");
  expect(await json.exited).toBe(0);

  const bad = await runAtomic(["runs", "--watch", "--limit", "0"], { home });
  expect(bad.code).toBe(2);
});

e2eTest("atomic runs --watch on a terminal redraws in place and ends on Ctrl-C", async () => {
  if (!HAS_SCRIPT) return;
  const home = makeTempDir();
  const done = await runAtomic(["run", PIPELINE, "--input", "pause=0"], { home, timeoutMs: 30_000 });
  expect(done.code).toBe(0);
  const id = /started run ([0-9a-z]{18})/.exec(done.stdout)![1]!;
  const watch = spawnInPty(["runs", "--watch"], { home, env: { NO_COLOR: "1" } });
  const frames = () => watch.text().split("atomic runs · 1 run(s)").length - 1;
  await waitUntil(() => frames() >= 2, 30_000, "a second frame").catch(async (e: Error) => {
    throw new Error(`${e.message}; the watch ${await watch.describe()}`);
  });
  // Ctrl-C typed on the terminal, after the watch has drawn twice (so its handler is in place)
  watch.ctrlC();
  const code = await Promise.race([watch.exited, Bun.sleep(20_000).then(() => "still running 20 s after Ctrl-C")]);
  expect(code).toBe(0);
  const out = watch.text();
  expect(out).toContain("\x1b[H");
  expect(out).toContain(id);
  expect(out).toContain("Ctrl-C to stop");
});

e2eTest("help lists serve and the new flags", async () => {
  const home = makeTempDir();
  expect((await runAtomic(["--help"], { home })).stdout).toMatch(/^\s+serve\s+the local service: the status page and API/m);
  const serve = (await runAtomic(["serve", "--help"], { home })).stdout;
  for (const flag of ["--port", "--host", "--open", "--no-recover", "--no-schedules", "--max-runs"]) expect(serve).toContain(flag);
  expect((await runAtomic(["run", "--help"], { home })).stdout).toContain("--serve");
  expect((await runAtomic(["runs", "--help"], { home })).stdout).toContain("--watch");
});

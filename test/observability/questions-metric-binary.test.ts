/**
 * `atomic_questions_waiting` at a real count, through the real binary:
 * three `atomic run`s of a workflow that asks one question (ctx.ask) park
 * on it while `atomic serve` runs. The gauge reads 3, and what the console
 * reads agrees (GET /api/runs?status=awaiting_input lists the three; each
 * run's inbox holds its one open question). One answer from the CLI
 * (`atomic answer`) and one from the JSON API take it to 1, the last to 0;
 * each run then ends with its answer as its output.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";
import { parseMetrics, sum } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const ASKS = join(import.meta.dir, "fixtures", "asks.ts");

e2eTest("questions waiting counts the runs parked on ctx.ask, as the console lists them, and goes back to 0 once they are answered", async () => {
  const home = makeTempDir();
  const serve = spawnAtomic(["serve", "--port", "0"], { home });
  const runs: { proc: ReturnType<typeof spawnAtomic>; id: string }[] = [];
  try {
    const login = (await lineWatcher(serve.stdout).waitFor(/^status page: /)).slice("status page: ".length).trim();
    const [, url, token] = /^(http:\/\/127\.0\.0\.1:\d+\/)\?token=([0-9a-f]{64})$/.exec(login)!;
    const headers = { authorization: `Bearer ${token}` };
    const api = async <T>(path: string, init: RequestInit = {}): Promise<T> => {
      const res = await fetch(`${url}${path}`, { ...init, headers: { ...headers, "content-type": "application/json" } });
      expect(res.status).toBe(200);
      return (await res.json()) as T;
    };
    const waiting = async () => sum(parseMetrics(await (await fetch(`${url}metrics`, { headers })).text()), "atomic_questions_waiting", {});

    for (let i = 0; i < 3; i++) {
      const proc = spawnAtomic(["run", ASKS], { home });
      const id = /started run ([0-9a-z]{18})/.exec(await lineWatcher(proc.stdout).waitFor(/started run /, 60_000))?.[1];
      expect(id).toBeDefined();
      runs.push({ proc, id: id! });
    }
    await waitUntil(async () => (await waiting()) === 3, 60_000, "three questions waiting in /metrics");

    // the console: the three runs listed as awaiting input, each with its open question
    const listed = await api<{ total: number; runs: { id: string }[] }>("api/runs?status=awaiting_input");
    expect(listed.total).toBe(3);
    expect(listed.runs.map((r) => r.id).sort()).toEqual(runs.map((r) => r.id).sort());
    const questions: string[] = [];
    for (const r of runs) {
      const box = await api<{ prompts: { id: string; state: string; question: string }[] }>(`api/runs/${r.id}/inbox`);
      expect(box.prompts.map((p) => [p.state, p.question])).toEqual([["open", "ship it?"]]);
      questions.push(box.prompts[0]!.id);
    }

    // one answered from the CLI, one from the JSON API: one left
    const cli = await runAtomic(["answer", runs[0]!.id, questions[0]!, "yes"], { home });
    expect(cli.code).toBe(0);
    await api(`api/runs/${runs[1]!.id}/answers`, { method: "POST", body: JSON.stringify({ question: questions[1], answer: "later" }) });
    await waitUntil(async () => (await waiting()) === 1, 60_000, "one question waiting in /metrics");
    // the answered runs go on (their drivers were told): the list follows
    await waitUntil(async () => (await api<{ total: number }>("api/runs?status=awaiting_input")).total === 1, 60_000, "one run listed as awaiting input");

    await api(`api/runs/${runs[2]!.id}/answers`, { method: "POST", body: JSON.stringify({ question: questions[2], answer: "no" }) });
    await waitUntil(async () => (await waiting()) === 0, 60_000, "no question waiting in /metrics");
    await waitUntil(async () => (await api<{ total: number }>("api/runs?status=awaiting_input")).total === 0, 60_000, "no run listed as awaiting input");
    expect(await Promise.all(runs.map((r) => r.proc.exited))).toEqual([0, 0, 0]);
    for (const [i, answer] of ["yes", "later", "no"].entries()) {
      const shown = JSON.parse((await runAtomic(["show", runs[i]!.id, "--json"], { home })).stdout);
      expect({ status: shown.run.status, output: shown.run.outputs }).toEqual({ status: "completed", output: { answer } });
    }
    expect(await waiting()).toBe(0);
  } finally {
    for (const r of runs) r.proc.kill("SIGKILL");
    serve.kill("SIGINT");
    await serve.exited;
  }
}, 180_000);

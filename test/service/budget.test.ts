/**
 * A run blocked by its budget continues without a terminal kept open:
 * `atomic resume RUN --max-cost N --detach` records the raised budget and
 * returns; the local service drives the run to its end. Stages run on the
 * pool against the fake OpenAI-compatible server (real HTTP on 127.0.0.1).
 */

import { expect, test } from "bun:test";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, type RecordedRequest } from "../helpers/fake-openai.ts";
import { newSetup, serviceCleanup, startService, twoScansLater, untilStatus } from "./support.ts";

serviceCleanup();

const TWO_AGENTS = join(import.meta.dir, "..", "budget", "fixtures", "two-agents.ts");
const firstUser = (req: RecordedRequest) => req.body.messages.find((m) => m.role === "user")!.content ?? "";

test("blocked by --max-cost, then resume --max-cost --detach: the service continues the run with the raised budget", async () => {
  const server = await startFakeOpenAI((req) =>
    firstUser(req).startsWith("second") ? text("second done", { prompt: 80, completion: 8, cost: 0.001 }) : text("first done", { prompt: 100, completion: 10, cost: 0.002 }),
  );
  try {
    const s = newSetup();
    const env = { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" };
    const blocked = await runAtomic(["--home", s.home, "run", TWO_AGENTS, "--workers", "1", "--max-cost", "0.001"], { home: s.home, env });
    expect(blocked.code).toBe(3);
    const runId = /run (\S+) blocked/.exec(blocked.stderr)![1]!;
    const service = startService(s, [], env);
    await service.log.waitFor(/"type":"service_active"/);
    // Blocked by a person's budget: not the service's to continue on its own.
    await twoScansLater(service);
    expect(service.events("drive_started")).toEqual([]);
    const raised = await runAtomic(["--home", s.home, "resume", runId, "--max-cost", "1", "--detach"], { home: s.home, env });
    expect(raised.code).toBe(0);
    expect(raised.stdout.split("\n")[0]).toBe(runId);
    const done = await untilStatus(s, runId, "completed");
    expect(done.run.outputs).toEqual({ first: "first done", second: "second done" });
    expect(service.events("drive_started").map((e) => e.runId)).toEqual([runId]);
    // The first stage was recorded before the block: it was never asked again.
    expect(server.requests.filter((q) => firstUser(q).startsWith("first")).length).toBe(1);
  } finally {
    await server.close();
  }
}, 120_000);

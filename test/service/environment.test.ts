/**
 * Runs pinned to their environment (issue 26), through dist/atomic: a run
 * started with FOO=1 parks on a question; a service started without FOO
 * resumes it once answered, and the workflow and its stage still see
 * FOO=1. A secret-named variable is never recorded: a run that had
 * MY_API_KEY, resumed by a service that lacks it, fails where the workflow
 * reads it, with one sentence naming it; the value is nowhere in the
 * journal.
 */

import { expect, test } from "bun:test";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic } from "../helpers/atomic.ts";
import { kill9, newSetup, serviceCleanup, startService, untilStatus, type Setup } from "./support.ts";

serviceCleanup();
const T = 120_000;
const FIXTURE = join(import.meta.dir, "fixtures", "environment.ts");

/** A run of the fixture started with `env`, parked on its question (its driver killed), and the question's id. */
async function parked(s: Setup, env: Record<string, string>, inputs: string[] = []) {
  const proc = spawnAtomic(["--home", s.home, "--json", "run", FIXTURE, ...inputs], { home: s.home, env });
  const out = lineWatcher(proc.stdout);
  const runId = JSON.parse(await out.waitFor(/"type":"run_started"/)).runId as string;
  await out.waitFor(/"kind":"ask"/);
  await kill9(proc);
  const inbox = JSON.parse((await runAtomic(["--home", s.home, "--json", "inbox", runId], { home: s.home })).stdout);
  return { runId, promptId: inbox.prompts[0].id as string };
}

test("a run started with FOO=1, recovered by a service started without it: the workflow and its stage still see FOO=1", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const { runId, promptId } = await parked(s, { FOO: "1" });
  expect((await runAtomic(["--home", s.home, "answer", runId, promptId, "yes"], { home: s.home })).code).toBe(0);
  const done = await untilStatus(s, runId, "completed");
  expect(done.run.outputs).toEqual({ answer: "yes", foo: "1", stage: "stage:1", key: null });
  expect(service.events("drive_started").map((e) => e.runId)).toEqual([runId]);
}, T);

test("a secret-named variable the service lacks: the run fails where the workflow reads it, naming it; its value is never recorded", async () => {
  const s = newSetup();
  const service = startService(s);
  await service.log.waitFor(/"type":"service_active"/);
  const secret = "sk-pinned-env-test-0123456789";
  const url = "postgres://app:pw-pinned-env-test-987@db.example/app";
  const { runId, promptId } = await parked(s, { FOO: "1", MY_API_KEY: secret, DATABASE_URL: url }, ["--input", "readSecret=true"]);
  await runAtomic(["--home", s.home, "answer", runId, promptId, "yes"], { home: s.home });
  const failed = await untilStatus(s, runId, "failed");
  expect(failed.run.error?.code).toBe("missing_secret");
  expect(failed.run.error?.message).toContain(`the workflow reads MY_API_KEY, which run ${runId} had when it started but this process's environment lacks (secrets are never recorded)`);
  // Neither the key nor the URL's password is in the journal (a URL with a password counts as a secret too).
  const files = await Promise.all(["atomic.db", "atomic.db-wal"].map(async (name) => ((await Bun.file(join(s.home, name)).exists()) ? Buffer.from(await Bun.file(join(s.home, name)).arrayBuffer()) : Buffer.alloc(0))));
  const bytes = Buffer.concat(files);
  // On Postgres the home holds no journal file: nothing to look into here.
  if (bytes.length > 0) {
    expect(bytes.includes("db.example")).toBe(false);
    expect(bytes.includes(secret)).toBe(false);
    expect(bytes.includes("pw-pinned-env-test-987")).toBe(false);
    expect(bytes.includes('"FOO":"1"')).toBe(true);
  }
  // Set in the resuming process, it is found again: the run completes.
  const again = await runAtomic(["--home", s.home, "--json", "resume", runId], { home: s.home, env: { MY_API_KEY: secret } });
  expect(again.code).toBe(0);
  expect(JSON.parse(again.stdout.trim().split("\n").at(-1)!).outputs).toEqual({ answer: "yes", foo: "1", stage: "stage:1", key: secret });
}, T);

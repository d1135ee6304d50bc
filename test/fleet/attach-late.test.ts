/**
 * `atomic attach` to a stage whose worker host went silent and whose lease on
 * it was taken back, so that it waits for a host: attaching after that, with
 * no other host left, attach says why the stage waits as `atomic show` does;
 * attached while the host still held it, with a lease too short for the host
 * to show lost first, attach says the host is gone once its lease is taken
 * back. Either way the view goes on and follows the stage on the next host.
 */

import { afterEach, beforeAll, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { runIdOf } from "../service/support.ts";
import { FIXTURES, cleanUpHosts, startHost } from "./support.ts";

beforeAll(async () => {
  await testPostgres();
});
afterEach(cleanUpHosts);

/** The run's long stage started on host faraway (a 3 s work lease); `kill` kills the host. */
async function stageOnHost(name: string) {
  const url = await freshDatabase(name);
  const dir = makeTempDir("atomic-attach-late-");
  const marks = join(dir, "marks");
  const home = join(dir, "root");
  const host = await startHost({ url, id: "faraway", slots: 1, leaseMs: 3_000 });
  const run = spawnAtomic(["run", join(FIXTURES, "long.ts"), "--workers", "0", "--json", "--input", `marks=${marks}`, "--input", `gate=${join(dir, "gate")}`], { home, env: { ATOMIC_JOURNAL: url } });
  const runId = await runIdOf(lineWatcher(run.stdout));
  await waitUntil(() => existsSync(marks) && readFileSync(marks, "utf8").includes("long-started"), 60_000, "the stage to start on the host");
  const attach = (env: Record<string, string> = {}) => {
    const proc = spawnAtomic(["--json", "attach", runId, "long"], { home, env: { ATOMIC_JOURNAL: url, ...env } });
    return Object.assign(lineWatcher(proc.stdout), { exited: proc.exited });
  };
  /** Another host takes the stage, the view follows it there to its end. */
  const finish = async (out: ReturnType<typeof attach>) => {
    await startHost({ url, id: "nearby", slots: 1 });
    await waitUntil(() => readFileSync(marks, "utf8").split("long-started").length === 3, 60_000, "the stage to start again on the other host");
    writeFileSync(join(dir, "gate"), "");
    expect((JSON.parse(await out.waitFor(/"type":"ended"/, 60_000)) as { status: string }).status).toBe("completed");
    expect(await out.exited).toBe(0);
    expect(await run.exited).toBe(0);
  };
  const kill = async () => {
    host.kill();
    await host.exited;
  };
  return { url, home, attach, finish, kill };
}

const notices = (lines: readonly string[]) => lines.filter((l) => l.includes('"type":"notice"')).map((l) => (JSON.parse(l) as { text: string }).text);

test("attach after the host's lease was taken back, with no host left: says the stage waits for a worker, once", async () => {
  const { url, home, attach, finish, kill } = await stageOnHost("attach_late");
  await kill();
  // The root took the item back once faraway's lease ran out: faraway holds no work.
  await waitUntil(async () => {
    const r = await runAtomic(["--json", "workers"], { home, env: { ATOMIC_JOURNAL: url } });
    return r.stdout.includes('"hostId":"faraway"') && r.stdout.includes('"busy":0');
  }, 60_000, "the root to take the stage back from the killed host");
  const out = attach({ ATOMIC_HOST_LOST_MS: "3000" });
  await out.waitFor(/"type":"attached"/, 30_000);
  await out.waitFor(/"type":"notice".*waiting for a worker/, 30_000);
  await finish(out);
  expect(notices(out.lines).filter((t) => t.startsWith("waiting for a worker"))).toEqual([expect.stringMatching(/^waiting for a worker on queue default; none seen for \d+ s$/)]);
}, 120_000);

test("attached while a host with a lease shorter than ATOMIC_HOST_LOST_MS held the stage: says the host is gone once the lease is taken back", async () => {
  const { attach, finish, kill } = await stageOnHost("attach_short_lease");
  // The default threshold (10 s): faraway never shows lost while its 3 s lease holds the stage. Attach sees
  // faraway hold it as it opens (before it prints anything), before the host is killed.
  const out = attach();
  await out.waitFor(/"type":"attached"/, 30_000);
  await kill();
  const notice = JSON.parse(await out.waitFor(/"type":"notice".*worker host faraway/, 30_000)) as { text: string; path: string };
  expect(notice.path).toBe("long");
  expect(notice.text).toMatch(
    /^worker host faraway, which runs attempt 1 of this stage, is gone \(silent for \d+ s\); its lease ran out, so the stage's next attempt starts elsewhere and this view follows it \(hint: atomic workers lists the hosts\)$/,
  );
  await finish(out);
  expect(out.lines.filter((l) => l.includes("worker host")).length).toBe(1);
}, 120_000);

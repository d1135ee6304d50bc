/**
 * `atomic attach` to a stage whose worker host is gone: the host runs the
 * run's one long stage and is killed (-9, every process of it); attach says
 * in one notice that the host is gone and that the stage's next attempt
 * follows once the host's lease runs out, and goes on following the stage:
 * another host runs it again and the view follows it there to its end.
 * Attach changes nothing: the stage's lease and attempt are the root's to
 * handle.
 */

import { afterEach, beforeAll, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { freshDatabase, testPostgres } from "../helpers/postgres.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { runIdOf } from "../service/support.ts";
import { FIXTURES, cleanUpHosts, startHost } from "./support.ts";

beforeAll(async () => {
  await testPostgres();
});
afterEach(cleanUpHosts);

test("attach to a stage on a worker host that is gone: one notice naming the host, and the view goes on", async () => {
  const url = await freshDatabase("attach_host");
  const dir = makeTempDir("atomic-attach-host-");
  const marks = join(dir, "marks");
  // Attach can say the host is gone only while the host is shown lost (3 s after its last heartbeat,
  // ATOMIC_HOST_LOST_MS below) and still holds the stage's lease: once the lease runs out the root gives the
  // item back and it is no host's. Heartbeats and lease renewals both come every second, so a lease as long as
  // that threshold left about a second (until the root's next reap) to attach, which looks once a second, and
  // CI's load made it miss it. A lease of 8 s leaves it five seconds, and the item still goes to the next
  // host soon.
  const host = await startHost({ url, id: "faraway", slots: 1, leaseMs: 8_000 });
  const home = join(dir, "root");
  // The stage waits for a gate the test opens at the end.
  const run = spawnAtomic(["run", join(FIXTURES, "long.ts"), "--workers", "0", "--json", "--input", `marks=${marks}`, "--input", `gate=${join(dir, "gate")}`], { home, env: { ATOMIC_JOURNAL: url } });
  const runId = await runIdOf(lineWatcher(run.stdout));
  await waitUntil(() => existsSync(marks) && readFileSync(marks, "utf8").includes("long-started"), 60_000, "the stage to start on the host");
  host.kill();
  await host.exited;
  const attach = spawnAtomic(["--json", "attach", runId, "long"], { home, env: { ATOMIC_JOURNAL: url, ATOMIC_HOST_LOST_MS: "3000" } });
  const out = lineWatcher(attach.stdout);
  await out.waitFor(/"type":"attached"/, 30_000);
  const notice = JSON.parse(await out.waitFor(/"type":"notice".*worker host faraway/, 30_000)) as { text: string; path: string };
  expect(notice.path).toBe("long");
  expect(notice.text).toMatch(
    /^worker host faraway, which runs attempt 1 of this stage, is gone \(silent for \d+ s\); once its lease runs out the stage's next attempt starts elsewhere and this view follows it \(hint: atomic workers lists the hosts\)$/,
  );
  // Still following: another host runs the stage again once the lease ran out (the same attempt, handed over),
  // and the view follows it there to the stage's end; the live host is not said gone.
  await startHost({ url, id: "nearby", slots: 1 });
  await waitUntil(() => readFileSync(marks, "utf8").split("long-started").length === 3, 60_000, "the stage to start again on the other host");
  writeFileSync(join(dir, "gate"), "");
  const ended = JSON.parse(await out.waitFor(/"type":"ended"/, 60_000)) as { status: string };
  expect(ended.status).toBe("completed");
  expect(await attach.exited).toBe(0);
  expect(out.lines.filter((l) => l.includes("worker host faraway")).length).toBe(1);
  expect(out.lines.filter((l) => l.includes("worker host nearby")).length).toBe(0);
  expect(await run.exited).toBe(0);
}, 120_000);

/**
 * Run tags through dist/atomic (issue 29): `atomic run --tag K=V`
 * (repeatable) and `ctx.tag` tag a run; `atomic runs --tag` finds it (every
 * tag must match) and shows a TAGS column and `tags` in --json; `atomic
 * show` prints them; a bad tag is one sentence and exit 2 before anything
 * runs, and a bad `ctx.tag` fails the run with bad_tag.
 */

import { afterAll, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const FIXTURE = join(import.meta.dir, "..", "status", "fixtures", "console.ts");
const home = makeTempDir();
afterAll(removeTempDirs);

const atomic = (args: string[]) => runAtomic(args, { home });
const started = (stdout: string) => /started run ([0-9a-z]{18})/.exec(stdout)![1]!;

test("run --tag and ctx.tag tag a run; runs --tag finds it; show prints the tags; bad tags are refused", async () => {
  const tagged = await atomic(["run", FIXTURE, "--input", "topic=search", "--tag", "team=search", "--tag", "env=prod"]);
  expect(tagged.code).toBe(0);
  const a = started(tagged.stdout);
  const plain = await atomic(["run", FIXTURE, "--input", "topic=other"]);
  expect(plain.code).toBe(0);
  const b = started(plain.stdout);

  const listed = await atomic(["runs", "--tag", "team=search", "--json"]);
  expect(listed.code).toBe(0);
  const rows = listed.stdout.trim().split("\n").map((l) => JSON.parse(l) as { id: string; tags: Record<string, string> });
  expect(rows.map((r) => [r.id, r.tags])).toEqual([[a, { env: "prod", team: "search", topic: "search" }]]);
  // ctx.tag alone tags a run too; several --tag must all match
  expect((await atomic(["runs", "--tag", "topic=other", "--json"])).stdout).toContain(b);
  expect((await atomic(["runs", "--tag", "team=search", "--tag", "env=staging"])).stdout).toBe("no runs match; see every run with: atomic runs\n");
  const table = (await atomic(["runs"])).stdout;
  expect(table).toContain("TAGS");
  expect(table).toContain("env=prod team=search topic=search");
  expect((await atomic(["show", a])).stdout).toMatch(/\ntags\s+env=prod team=search topic=search\n/);

  const noValue = await atomic(["run", FIXTURE, "--input", "topic=x", "--tag", "team"]);
  expect([noValue.code, noValue.stderr.trim()]).toEqual([2, 'error: --tag "team" is not KEY=VALUE.\nhint: for example --tag team=search']);
  const badKey = await atomic(["runs", "--tag", "bad key=x"]);
  expect(badKey.code).toBe(2);
  expect(badKey.stderr).toStartWith('error: --tag "bad key=x": tag key "bad key" must be 1 to 64 letters, digits or _ . - / starting with a letter or digit');
  const long = await atomic(["run", FIXTURE, "--input", "topic=x", "--tag", `k=${"v".repeat(300)}`]);
  expect(long.code).toBe(2);
  expect(long.stderr).toContain("is 300 characters long; at most 256 are kept");
  expect((await atomic(["runs", "--json"])).stdout.trim().split("\n")).toHaveLength(2); // nothing was started by the refusals

  const dir = makeTempDir();
  writeFileSync(join(dir, "badtag.ts"), 'import { workflow } from "atomic";\nexport default workflow({ name: "badtag", async run(ctx) { await ctx.tag("no spaces allowed", "x"); } });\n');
  const bad = await atomic(["run", join(dir, "badtag.ts")]);
  expect(bad.code).toBe(1);
  expect(bad.stderr).toContain('ctx.tag: tag key "no spaces allowed" must be 1 to 64 letters');
}, 120_000);

/**
 * The compiled binary itself: it must not read bunfig.toml (whose preload
 * scripts would run inside atomic) or .env (whose secrets would land in
 * every stage's environment) from the directory it is started in.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

e2eTest("a bunfig.toml preload and a .env in the working directory are ignored", async () => {
  const dir = makeTempDir();
  const marker = join(dir, "preload-ran");
  writeFileSync(join(dir, "bunfig.toml"), 'preload = ["./evil.ts"]\n[run]\npreload = ["./evil.ts"]\n');
  writeFileSync(join(dir, "evil.ts"), `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "x");\n`);
  writeFileSync(join(dir, ".env"), "ATOMIC_TEST_SECRET=leaked\n");
  writeFileSync(
    join(dir, "wf.ts"),
    `import { workflow } from "atomic";
export default workflow({ name: "sec", async run(ctx) {
  const r = await ctx.shell("env", "echo \${ATOMIC_TEST_SECRET:-none}");
  return { inRoot: process.env.ATOMIC_TEST_SECRET ?? "none", inStage: r.text.trim() };
} });
`,
  );
  const r = await runAtomic(["run", "wf.ts", "--json"], { home: makeTempDir(), cwd: dir });
  expect(r.code).toBe(0);
  const result = JSON.parse(r.stdout.trim().split("\n").pop()!);
  expect(result.outputs).toEqual({ inRoot: "none", inStage: "none" });
  expect(await Bun.file(marker).exists()).toBe(false);
});

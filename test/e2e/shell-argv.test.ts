/**
 * Passing values to shell stages safely, through the binary: the argv form
 * (`ctx.shell(name, ["cmd", …])`, no shell) and the `sh` template (each
 * value one quoted word) pass spaces, quotes, `$(…)`, `;`, newlines, a
 * leading `-`, an empty string and a glob literally, on pool workers and in
 * process; an empty argv is one clear error before any stage is recorded;
 * replay tells the argv form from a command string; the README's first
 * example runs as written.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const VALUES = ["a b", `it's "q"`, "$(touch pwned)", "x; touch pwned2", "line1\nline2", "-n", "", "*", "`touch pwned3`"];

const LITERAL = `import { workflow, sh } from "atomic";
const vals = ${JSON.stringify(VALUES)};
export default workflow({
  name: "literal",
  async run(ctx) {
    const argv = await ctx.shell("argv", ["printf", "[%s]\\\\n", ...vals]);
    const tmpl = await ctx.shell("tmpl", sh\`printf '[%s]\\\\n' \${vals} | cat\`);
    const data = await ctx.parallel([{ name: "data", shell: ["printf", "[%s]\\\\n", ...vals] }]);
    const one = await ctx.shell("one", sh\`echo \${vals[2]} \${vals[5]}\`);
    return { argv: argv.text, tmpl: tmpl.text, data: (data[0] as { text: string }).text, one: one.text };
  },
});
`;

const expected = VALUES.map((v) => `[${v}]\n`).join("");

for (const mode of [[], ["--in-process"]]) {
  e2eTest(`values pass literally in the argv form and the sh template${mode.length ? " (in process)" : ""}`, async () => {
    const dir = makeTempDir();
    const file = join(dir, "literal.ts");
    writeFileSync(file, LITERAL);
    const r = await runAtomic(["run", file, "--json", ...mode], { home: join(dir, "home"), cwd: dir });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
    expect(out.argv).toBe(expected);
    expect(out.tmpl).toBe(expected);
    expect(out.data).toBe(expected);
    expect(out.one).toBe("$(touch pwned) -n\n");
    expect(readdirSync(dir).filter((f) => f.startsWith("pwned"))).toEqual([]);
  });
}

e2eTest("an empty argv is one clear error, before the stage is recorded or started", async () => {
  const dir = makeTempDir();
  const file = join(dir, "empty.ts");
  writeFileSync(file, `import { workflow } from "atomic";\nexport default workflow({ name: "empty", async run(ctx) { await ctx.shell("nothing", []); } });\n`);
  const home = join(dir, "home");
  const r = await runAtomic(["run", file], { home, cwd: dir });
  expect(r.code).not.toBe(0);
  expect(r.stderr).toContain(`stage "nothing": the argv form needs at least the program to run (it is empty)`);
  expect(r.stderr).not.toMatch(/\n\s+at /);
  expect(r.stderr).not.toContain("stage nothing started");
  const runId = /started run ([0-9a-z]{18})/.exec(r.stderr + r.stdout)![1]!;
  const show = JSON.parse((await runAtomic(["show", runId, "--json"], { home })).stdout);
  expect(show.steps.filter((s: { name: string }) => s.name === "nothing")).toEqual([]);
  expect(existsSync(join(home, "artifacts", runId, "0-nothing"))).toBe(false);
});

e2eTest("replay tells the argv form from a command string: changing one into the other is a divergence", async () => {
  const dir = makeTempDir();
  const file = join(dir, "swap.ts");
  const gate = join(dir, "gate");
  const source = (stage: string) => `import { workflow } from "atomic";
export default workflow({
  name: "swap",
  async run(ctx) {
    const r = await ctx.shell("say", ${stage});
    await ctx.tool("gate", {}, async () => { if (!(await Bun.file(${JSON.stringify(gate)}).exists())) throw new Error("gate closed"); }, { retries: 0 });
    return r.text;
  },
});
`;
  writeFileSync(file, source(`"echo a b"`));
  const home = join(dir, "home");
  const first = await runAtomic(["run", file], { home, cwd: dir });
  expect(first.code).not.toBe(0);
  const runId = /started run ([0-9a-z]{18})/.exec(first.stderr + first.stdout)![1]!;
  writeFileSync(file, source(`["echo", "a b"]`));
  writeFileSync(gate, "");
  const swapped = await runAtomic(["resume", runId, "--upgrade"], { home, cwd: dir });
  expect(swapped.code).not.toBe(0);
  expect(swapped.stderr + swapped.stdout).toMatch(/replayed differently/);
  // the same form again replays (a plain resume runs the code the run is pinned to, which a failed --upgrade left as it was)
  writeFileSync(file, source(`"echo a b"`));
  const again = await runAtomic(["resume", runId, "--json"], { home, cwd: dir });
  expect(again.code).toBe(0);
  expect(JSON.parse(again.stdout.trim().split("\n").at(-1)!).outputs).toBe("a b\n");
});

e2eTest("the writing-workflows guide's first example runs as written, also on a directory name that is shell code", async () => {
  const guide = readFileSync(join(ROOT, "docs", "guides", "writing-workflows.md"), "utf8");
  const example = /```ts\n(\/\/ file: review\.ts[\s\S]*?)```/.exec(guide)![1]!;
  const dir = makeTempDir();
  writeFileSync(join(dir, "review.ts"), example);
  const target = join(dir, "a dir; touch pwned $(touch pwned2)");
  mkdirSync(target);
  writeFileSync(join(target, "one.txt"), "1");
  writeFileSync(join(target, "two.txt"), "2");
  const r = await runAtomic(["run", "./review.ts", "--input", `dir=${target}`, "--input", "depth=3", "--json"], { home: join(dir, "home"), cwd: dir });
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
  expect(out.ticket.files).toBe(2);
  expect(out.size).toMatch(/^\d+(\.\d+)?[KMG]?$/);
  expect(readdirSync(dir).filter((f) => f.startsWith("pwned"))).toEqual([]);
});

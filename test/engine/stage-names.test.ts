/**
 * The stage-name scan over a few source shapes: literal names of task,
 * shell and parallel/chain steps (TypeScript types stripped), names built
 * at run time (template literals with expressions, variables, step arrays
 * that are not literals, stage methods destructured or called by a computed
 * key), and a file that does not parse.
 */

import { describe, expect, test } from "bun:test";
import { builtinNames, builtinSource } from "../../src/engine/builtins.ts";
import { scanStageNames } from "../../src/engine/stage-names.ts";

describe("scanStageNames", () => {
  test("literal names of task, shell and parallel/chain object steps are proven; function steps are walked", () => {
    const src = `
      import { workflow } from "atomic";
      interface Opts { n: number }
      export default workflow({ name: "w", async run(ctx: any): Promise<void> {
        const o: Opts = { n: 1 };
        await ctx.shell("gate", "true");
        await ctx.task(\`review\`, { prompt: "p" });
        await ctx.parallel([{ name: "security", prompt: "a" }, { "name": "style", prompt: "b" }, async () => ctx.shell("inner", "x")]);
        await ctx.chain([{ name: "last", prompt: "c" }]);
        await ctx.sleep(10, "nap");
      } });`;
    const scanned = scanStageNames([src]);
    expect([...scanned.names].sort()).toEqual(["gate", "inner", "last", "review", "security", "style"]);
    expect(scanned.computed).toBe(false);
  });

  test("names built at run time mark the scan computed; literal names in other files still count", () => {
    for (const src of [
      "export default async (ctx: any, f: string) => { await ctx.shell(`lint-${f}`, 'x'); }",
      "export default async (ctx: any, name: string) => { await ctx.task(name, { prompt: 'p' }); }",
      "export default async (ctx: any, steps: any[]) => { await ctx.parallel(steps); }",
      "export default async (ctx: any, n: string) => { await ctx.parallel([{ name: n, prompt: 'p' }]); }",
      "export default async (ctx: any) => { const { task } = ctx; await task('hidden', { prompt: 'p' }); }",
      "export default async (ctx: any, m: string) => { await ctx[m]('hidden', 'x'); }",
    ]) {
      const scanned = scanStageNames([src, "export const s = (ctx: any) => ctx.shell('fixed', 'x');"]);
      expect(scanned.computed).toBe(true);
      expect([...scanned.names]).toEqual(["fixed"]);
    }
  });

  test("a file that does not parse proves nothing: the scan is permissive", () => {
    expect(scanStageNames(["export default (("]).computed).toBe(true);
  });

  test("the builtins' embedded sources are read: classify-and-act names its two agent stages", () => {
    for (const name of builtinNames()) expect(builtinSource(name)).toBeString();
    expect(scanStageNames([builtinSource("classify-and-act")!])).toEqual({ names: new Set(["classify", "act"]), computed: false });
  });
});

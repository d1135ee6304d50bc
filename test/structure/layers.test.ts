/**
 * The layering of src/ (docs/design/layers.md) holds: no import runs back
 * up, and no files import each other in a loop. The imports are read by the TypeScript compiler
 * (./import-graph.ts), type-only ones included. The checks themselves are
 * tried first on small made-up graphs, so a check that found nothing is
 * known to be able to find something.
 */

import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { backArrows, circles, readImports, type ImportEdge } from "./import-graph.ts";

const ROOT = join(import.meta.dir, "..", "..");

/** The folders of src/ from the top down: each may import the layers below it, none of its own layer or above. */
const LAYERS: readonly (readonly string[])[] = [
  ["main.ts"],
  ["cli"],
  ["service", "testing"],
  ["status", "fleet"],
  ["engine", "pool"],
  ["journal", "intercom", "runners", "workflows"],
  ["sdk", "artifacts"],
  ["shared"],
];

/** What src/ may import from outside it: the package's own manifest (shared/version.ts reads the version). */
const OUTSIDE = (path: string) => path === "package.json";

const edge = (from: string, to: string): ImportEdge => ({ from, to, typeOnly: false });

describe("the checks", () => {
  test("an import from a lower layer to a higher one, or between siblings of one layer, is a back-arrow; down and within a folder is not", () => {
    const found = backArrows(
      [
        edge("src/journal/a.ts", "src/engine/b.ts"),
        edge("src/engine/b.ts", "src/pool/c.ts"),
        edge("src/engine/b.ts", "src/journal/a.ts"),
        edge("src/engine/b.ts", "src/engine/steps/d.ts"),
        edge("src/shared/e.ts", "test/helpers/f.ts"),
        edge("src/shared/e.ts", "package.json"),
        edge("src/newfolder/g.ts", "src/shared/e.ts"),
      ],
      LAYERS,
      OUTSIDE,
    );
    expect(found.map((f) => `${f.from} -> ${f.to}`)).toEqual([
      "src/journal/a.ts -> src/engine/b.ts",
      "src/engine/b.ts -> src/pool/c.ts",
      "src/shared/e.ts -> test/helpers/f.ts",
      "src/newfolder/g.ts -> src/shared/e.ts",
    ]);
    expect(found[0]!.why).toBe("journal/ may not import engine/ (a layer above it)");
    expect(found[1]!.why).toBe("engine/ may not import pool/ (a sibling in its own layer)");
    expect(found[3]!.why).toContain("src/newfolder is in no layer");
  });

  test("files that reach each other are one circle; a chain is none; a file importing itself is one", () => {
    const found = circles([
      edge("a", "b"),
      edge("b", "c"),
      edge("c", "a"),
      edge("c", "d"),
      edge("d", "e"),
      edge("f", "f"),
    ]);
    expect(found.sort()).toEqual([["a", "b", "c"], ["f"]]);
  });
});

describe("src/", () => {
  test(
    "no import runs back up the layers, and no files import each other in a loop",
    async () => {
      const edges = await readImports(ROOT);
      // The reading saw the tree: files of every layer, and type-only imports among them.
      const folders = new Set(edges.map((e) => e.from.split("/")[1]));
      for (const folder of LAYERS.flat()) expect(folders.has(folder)).toBe(true);
      expect(edges.some((e) => e.typeOnly)).toBe(true);

      const back = backArrows(edges, LAYERS, OUTSIDE).map((b) => `${b.from} -> ${b.to}${b.typeOnly ? " (type)" : ""}: ${b.why}`);
      expect(back).toEqual([]);

      expect(circles(edges)).toEqual([]);
    },
    180_000,
  );
});

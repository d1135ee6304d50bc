/**
 * Pure parts of the status server: the stage graph derived from replay
 * positions (fan-outs, chains, joins, nesting, child groups), the stream
 * cursor's text form, and UTF-8-safe output chunks.
 */

import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { RunReport, StepReport } from "../../src/engine/run-report.ts";
import type { RunRecord } from "../../src/journal/runs.ts";
import { buildRunGraph, type GraphBlock } from "../../src/status/graph.ts";
import { formatCursor, parseCursor } from "../../src/status/stream-cursor.ts";
import { readChunk, wholeCharacters } from "../../src/status/transcript.ts";

function step(position: string, name: string, startedAt: number, endedAt: number | null, extra: Partial<StepReport> = {}): StepReport {
  return { position, kind: "stage", name, status: endedAt === null ? "running" : "completed", attempts: 1, startedAt, endedAt, attemptLog: [], ...extra };
}

function report(id: string, steps: StepReport[], status: RunReport["status"] = "completed"): RunReport {
  return { run: { id, workflowName: id } as RunRecord, status, steps };
}

function shape(b: GraphBlock): string {
  if (b.type === "node") return b.node.group ? `${b.node.name}{${shape(b.node.group.body)}}` : b.node.kind === "join" ? "+" : b.node.name;
  if (b.type === "seq") return b.items.map(shape).join(" > ");
  return `[${b.branches.map(shape).join("|")}]`;
}

describe("stage graph from positions", () => {
  test("overlapping branches fan out; branches that ran one after another are a chain", () => {
    const fan = buildRunGraph(report("r", [step("0", "a", 0, 5), step("1.0.0", "x", 10, 30), step("1.1.0", "y", 11, 25), step("2", "z", 31, 40)]));
    expect(shape(fan.root)).toBe("a > [x|y] > z");
    expect(fan.edges).toEqual([
      { from: "r:0", to: "r:1.0.0" },
      { from: "r:0", to: "r:1.1.0" },
      { from: "r:1.0.0", to: "r:2" },
      { from: "r:1.1.0", to: "r:2" },
    ]);
    const chain = buildRunGraph(report("r", [step("0.0.0", "p", 0, 10), step("0.1.0", "q", 10, 20), step("0.2.0", "s", 21, 30)]));
    expect(shape(chain.root)).toBe("p > q > s");
    expect(chain.edges).toHaveLength(2);
    // instant steps (same millisecond) say nothing about order: drawn as a fan-out
    expect(shape(buildRunGraph(report("r", [step("0.0.0", "p", 5, 5), step("0.1.0", "q", 5, 5)])).root)).toBe("[p|q]");
    // a branch still running is not followed by the next one: fan-out
    expect(shape(buildRunGraph(report("r", [step("0.0.0", "p", 0, null), step("0.1.0", "q", 3, null)])).root)).toBe("[p|q]");
  });

  test("two fan-outs in a row meet in a join node; nested groups stay nested", () => {
    const steps: StepReport[] = [];
    for (let i = 0; i < 4; i++) steps.push(step(`0.${i}.0`, `a${i}`, 0, 10));
    for (let i = 0; i < 5; i++) steps.push(step(`1.${i}.0`, `b${i}`, 11, 20));
    const g = buildRunGraph(report("r", steps));
    expect(shape(g.root)).toBe("[a0|a1|a2|a3] > + > [b0|b1|b2|b3|b4]");
    expect(g.edges).toHaveLength(4 + 5);
    expect(g.nodeCount).toBe(10);
    const nested = buildRunGraph(
      report("r", [step("0.0.0", "x", 0, 10), step("0.1.0.0.0", "y1", 0, 10), step("0.1.0.1.0", "y2", 0, 10), step("0.1.1", "after-y", 11, 12), step("1", "end", 13, 14)]),
    );
    expect(shape(nested.root)).toBe("[x|[y1|y2] > after-y] > end");
    expect(nested.edges).toEqual(
      expect.arrayContaining([
        { from: "r:0.1.0.0.0", to: "r:0.1.1" },
        { from: "r:0.1.0.1.0", to: "r:0.1.1" },
        { from: "r:0.0.0", to: "r:1" },
        { from: "r:0.1.1", to: "r:1" },
      ]),
    );
    expect(nested.edges).toHaveLength(4);
  });

  test("a child workflow is a node holding the child's graph; a sleep runs until it wakes", () => {
    const child = report("c", [step("0", "inner", 5, 8)]);
    const g = buildRunGraph(
      report("r", [step("0", "kid", 1, 9, { kind: "child", childRunId: "c", child }), step("1", "nap", 10, 10, { kind: "sleep", wakeAt: Date.now() + 60_000 })], "running"),
    );
    expect(shape(g.root)).toBe("kid{inner} > nap");
    const [kid, nap] = (g.root as Extract<GraphBlock, { type: "seq" }>).items.map((b) => (b as Extract<GraphBlock, { type: "node" }>).node);
    expect(kid!.group).toMatchObject({ runId: "c", workflow: "c" });
    expect(nap).toMatchObject({ kind: "sleep", status: "running", endedAt: null });
    expect(g.edges).toEqual([{ from: "r:0", to: "r:1" }]);
    expect(g.nodeCount).toBe(3);
  });
});

describe("stream cursor", () => {
  test("round trip; children with nothing delivered are left out; bad text is refused", () => {
    const seqs = new Map([["", 42], ["0", 17], ["0.0", 3], ["1", 0]]);
    const text = formatCursor(["", "0", "0.0", "1"], (p) => seqs.get(p) ?? 0);
    expect(text).toBe("42;0:17;0.0:3");
    expect(parseCursor(text)).toEqual(new Map([["", 42], ["0", 17], ["0.0", 3]]));
    expect(parseCursor(" 7 ")).toEqual(new Map([["", 7]]));
    for (const bad of ["", "x", "1;", "1;0", "1;0:", "1;:3", "-1", "1;0:1;0:2", "1;a:2", "1.5", "1;0..1:2"]) expect(parseCursor(bad)).toBeUndefined();
  });
});

describe("stage output chunks", () => {
  test("a chunk never ends inside a UTF-8 character while the stage may still write", () => {
    const bytes = Buffer.from("aé€😀", "utf8"); // 1 + 2 + 3 + 4 bytes
    for (let n = 0; n <= bytes.length; n++) {
      const keep = wholeCharacters(bytes, n);
      expect(() => new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(0, keep))).not.toThrow();
      expect(n - keep).toBeLessThan(4);
    }
    const dir = mkdtempSync(join(tmpdir(), "atomic-chunk-"));
    try {
      const file = join(dir, "stdout.log");
      writeFileSync(file, bytes.subarray(0, 5)); // "aé" and two bytes of "€"
      expect(readChunk(file, 0, 1024, false)).toMatchObject({ text: "aé", next: 3, size: 5, more: true });
      writeFileSync(file, bytes);
      expect(readChunk(file, 3, 1024, true)).toMatchObject({ text: "€😀", offset: 3, next: 10, more: false });
      expect(readChunk(file, 0, 4, true)).toMatchObject({ text: "aé", next: 3, more: true });
      expect(readChunk(file, 99, 1024, true)).toMatchObject({ text: "", offset: 10, next: 10 });
      expect(readChunk(join(dir, "none.log"), 0, 1024, true)).toMatchObject({ missing: true, text: "" });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

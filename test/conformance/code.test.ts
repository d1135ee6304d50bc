/**
 * The pinned-code store of every journal backend (journal/code.ts): files
 * are stored once by digest (a second put only touches them), get returns
 * the stored ones byte for byte and leaves missing ones out, and sweep
 * deletes what no run's manifest names among files stored before the
 * cutoff: a run's manifest keeps itself and its files, a file stored after
 * the cutoff stays, and the code goes with the last run that used it.
 */

import { afterEach, describe, expect, test } from "bun:test";
import type { Journal } from "../../src/journal/journal.ts";
import type { CodeFile } from "../../src/journal/code.ts";
import { newRunId } from "../../src/shared/ids.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { BACKENDS, liveHolder } from "./backends.ts";

const open: Journal[] = [];
afterEach(async () => {
  for (const j of open.splice(0)) await j.close();
  removeTempDirs();
});

const bytes = (text: string) => new TextEncoder().encode(text);
const sha = (content: Uint8Array) => new Bun.CryptoHasher("sha256").update(content).digest("hex");
function file(text: string): CodeFile {
  const content = bytes(text);
  return { digest: sha(content), content };
}
function manifest(files: Record<string, CodeFile>): CodeFile {
  return file(JSON.stringify({ entry: "flow.ts", files: Object.fromEntries(Object.entries(files).map(([p, f]) => [p, f.digest])) }));
}

for (const backend of BACKENDS) {
  describe(`${backend.name}: pinned code`, () => {
    async function journal(): Promise<Journal> {
      const j = await backend.open(makeTempDir());
      open.push(j);
      return j;
    }

    async function runWith(j: Journal, version: string) {
      const id = newRunId();
      const lease = await j.acquireLease(id, liveHolder(), { timeoutMs: 60_000 });
      const [outcome] = await j.append(lease, [
        {
          runId: id,
          type: "run_started",
          payload: {},
          newRun: { rootId: id, parentId: null, parentKey: null, depth: 0, workflowName: "flow", workflowPath: "/p/flow.ts", workflowDigest: version, inputs: {} },
        },
      ]);
      expect(outcome!.status).toBe("appended");
      return id;
    }

    test(`${backend.name}: put stores each file once, get returns the stored bytes and leaves missing ones out`, async () => {
      const j = await journal();
      const entry = file("export default 1;\n");
      const binary: CodeFile = { digest: sha(new Uint8Array([0, 255, 10, 13])), content: new Uint8Array([0, 255, 10, 13]) };
      await j.code.put([entry, binary], 1_000);
      await j.code.put([entry], 2_000);
      const got = await j.code.get([entry.digest, binary.digest, "f".repeat(64)]);
      expect([...got.keys()].sort()).toEqual([entry.digest, binary.digest].sort());
      expect([...got.get(entry.digest)!]).toEqual([...entry.content]);
      expect([...got.get(binary.digest)!]).toEqual([0, 255, 10, 13]);
      expect((await j.code.get([])).size).toBe(0);
    });

    test(`${backend.name}: sweep keeps what a run's manifest names and what was stored after the cutoff`, async () => {
      const j = await journal();
      const shared = file("export const shared = 1;\n");
      const a = { "flow.ts": file("import './lib.ts';\n// a\n"), "lib.ts": shared };
      const b = { "flow.ts": file("import './lib.ts';\n// b\n"), "lib.ts": shared };
      const ma = manifest(a);
      const mb = manifest(b);
      await j.code.put([ma, ...Object.values(a)], 1_000);
      await j.code.put([mb, ...Object.values(b)], 1_000);
      const orphan = file("nobody's\n");
      await j.code.put([orphan], 1_000);
      const late = file("stored after the cutoff\n");
      await j.code.put([late], 5_000);
      await runWith(j, ma.digest);
      await runWith(j, mb.digest);
      // Only the orphan goes: both manifests are runs', the shared file is named by both, the late one is new.
      expect(await j.code.sweep(2_000)).toBe(1);
      expect((await j.code.get([orphan.digest])).size).toBe(0);
      const kept = await j.code.get([ma.digest, mb.digest, shared.digest, a["flow.ts"].digest, b["flow.ts"].digest, late.digest]);
      expect(kept.size).toBe(6);
      expect(await j.code.sweep(2_000)).toBe(0);
    });

    test(`${backend.name}: code no run uses any more is swept, with the files only it named`, async () => {
      const j = await journal();
      const lib = file("export const x = 2;\n");
      const entry = file("import './lib.ts';\n");
      const m = manifest({ "flow.ts": entry, "lib.ts": lib });
      await j.code.put([m, entry, lib], 1_000);
      // No run names the manifest (its run was deleted): all three go.
      expect(await j.code.sweep(2_000)).toBe(3);
      expect((await j.code.get([m.digest, entry.digest, lib.digest])).size).toBe(0);
    });
  });
}

/**
 * A sandboxed shell stage keeps its grace period when it is stopped: the
 * SIGTERM goes to the processes inside the sandbox, not to bwrap, whose
 * death would end the PID namespace at once (src/runners/shell/stage-stop.ts).
 * The stage's trap on TERM takes a moment of cleanup before it writes its
 * note, as a real cleanup does; a SIGTERM to bwrap would kill it mid-trap
 * and leave no note. Both through `atomic cancel` (network none) and Ctrl-C
 * of `atomic run` (network provider, where atomic's network helper sits
 * between bwrap and the shell). Nothing of the stage is left afterwards.
 *
 * A third case has a CLI agent's shape: the stage's first process ends at
 * once on its SIGTERM (no trap) while a child of it cleans up. bwrap's init
 * is held for the grace (stage-stop.ts), so the namespace does not end with
 * the first process and the child's cleanup runs to its end.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { pidsRunning } from "../helpers/processes.ts";
import { sandboxWorld } from "../helpers/sandbox-world.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const WORKFLOW = fixture("sandboxed.ts");

const cleanup = "trap 'sleep 0.3; echo termed > termed.txt; exit 0' TERM";
for (const [how, sandbox, shape] of [
  ["atomic cancel", true, "its trap on TERM"],
  ["Ctrl-C (SIGINT) of atomic run", { network: "provider" }, "its trap on TERM"],
  ["atomic cancel", true, "a child's trap on TERM, the first process ending at once,"],
] as const) {
  e2eTest(`${how} of a sandboxed shell stage: ${shape} runs to the end inside the sandbox; nothing of the stage is left`, async () => {
    const w = sandboxWorld();
    try {
      const marker = String(9_000_000 + Math.floor(Math.random() * 1_000_000));
      const shell =
        shape === "its trap on TERM"
          ? `${cleanup}; sleep ${marker} & touch started; wait`
          : `(${cleanup}; sleep ${marker} & touch started; wait) & wait`;
      const proc = spawnAtomic(["run", WORKFLOW, "--json", "--workers", "1", "--input", `shell=${shell}`, "--input", `sandbox=${JSON.stringify(sandbox)}`], { home: w.home, cwd: w.cwd, env: w.env });
      const out = lineWatcher(proc.stdout);
      await waitUntil(() => existsSync(join(w.cwd, "started")), 30_000, "the stage to start");
      if (how === "atomic cancel") {
        const id = (JSON.parse(await out.waitFor(/"run_started"/)) as { runId: string }).runId;
        expect((await runAtomic(["cancel", id], { home: w.home, env: w.env })).code).toBe(0);
      } else {
        proc.kill("SIGINT");
      }
      await proc.exited;
      expect(readFileSync(join(w.cwd, "termed.txt"), "utf8")).toBe("termed\n");
      await waitUntil(() => pidsRunning(["sleep", marker]).length === 0, 30_000, "the stage's sleep to end");
    } finally {
      w.close();
    }
  });
}

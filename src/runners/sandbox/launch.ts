/**
 * One sandboxed command of a stage: the shell runner's command, one call
 * of the openai loop's `bash` tool, a CLI agent's process. `sandboxed()`
 * turns the command and its environment into bwrap's (bwrap.ts), with the
 * provider network's gate opened first when the stage has one
 * (provider-gate.ts outside, net-init.ts inside); `close()` closes the gate
 * once the command has ended. A request without a sandbox passes through
 * unchanged. See docs/design/sandbox.md.
 */

import { closeSync, openSync, readSync, realpathSync } from "node:fs";
import { dirname, join, sep } from "node:path";
import type { StageRequest } from "../types.ts";
import { ROLE, isCompiled, selfCommand } from "../../shared/self-exec.ts";
import { userHome } from "../../shared/sandbox-option.ts";
import { bwrapArgs, bwrapPath, sandboxProblem } from "./bwrap.ts";
import { endpointOf, openProviderGate, type ProviderGate } from "./provider-gate.ts";

/** The port of the provider proxy on the sandbox's own loopback (HTTPS_PROXY inside), unless a tunnelled port is it. */
export const PROXY_PORT = 3128;

/** The proxy's port inside: PROXY_PORT, or the next one no tunnelled loopback port takes (net-init.ts listens on all). */
function proxyPort(tunnelled: readonly number[]): number {
  let port = PROXY_PORT;
  while (tunnelled.includes(port)) port++;
  return port;
}

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
  /** Paths inside a writable one that stay read-only (the CLI's auth file in its state directory). */
  readOnly?: readonly string[];
  /** The cwd read-only (a CLI whose tools only read). */
  cwdReadOnly?: boolean;
  /** The model provider's endpoints (host:port) besides the stage's own `hosts`. */
  endpoints?: readonly string[];
}

/**
 * `argv` with `env`, sandboxed as the request says (or unchanged); throws with the sentence when no sandbox can be made
 * here. `onProblem` hears what the provider gate told the stage about a provider it could not reach (a host that does
 * not resolve): the runner writes it where the stage's own errors go.
 */
export function sandboxed(request: Pick<StageRequest, "sandbox" | "cwd">, argv: readonly string[], env: Record<string, string>, files: RunnerFiles = {}, onProblem?: (sentence: string) => void): Sandboxed {
  const sandbox = request.sandbox;
  if (!sandbox) return { argv: [...argv], env, close() {} };
  const problem = sandboxProblem();
  if (problem) throw new Error(`${problem.message}; hint: ${problem.hint}`);
  let gate: ProviderGate | undefined;
  let inner = [...argv];
  const setenv: Record<string, string> = {};
  const writable = [...(files.writable ?? [])];
  // The program itself stays visible wherever it is installed (under the hidden home, /tmp, a checkout); so does
  // atomic (the helper below, the stage MCP server a CLI starts) and its channels to the stage (the broker's socket).
  const readable = [...(files.readable ?? []), ...programFiles(argv[0], env.PATH), ...(sandbox.channels ?? [])];
  if (sandbox.channels?.length) readable.push(...atomicFiles());
  if (sandbox.network === "provider") {
    gate = openProviderGate([...sandbox.hosts, ...(files.endpoints ?? [])], onProblem);
    const port = proxyPort(gate.loopbackPorts);
    inner = [...selfCommand(ROLE.sandboxNet, gate.dir, String(port), gate.loopbackPorts.join(",")), "--", ...argv];
    writable.push(gate.dir);
    readable.push(...atomicFiles());
    const proxy = `http://127.0.0.1:${port}`;
    const loopback = "127.0.0.1,localhost,::1";
    Object.assign(setenv, { HTTPS_PROXY: proxy, HTTP_PROXY: proxy, https_proxy: proxy, http_proxy: proxy, ALL_PROXY: proxy, NO_PROXY: loopback, no_proxy: loopback });
  }
  const args = bwrapArgs(
    { spec: sandbox, cwd: request.cwd, hidden: sandbox.hidden, writable, readable, ...(files.allowed ? { allowed: files.allowed } : {}), ...(files.readOnly ? { readOnly: files.readOnly } : {}), ...(files.cwdReadOnly ? { cwdReadOnly: true } : {}), home: userHome(env), ...(env.TMPDIR ? { tmpdir: env.TMPDIR } : {}), setenv },
    inner,
  );
  return { argv: [bwrapPath()!, ...args], env, close: () => gate?.close() };
}

/** This binary (from source: bun and src/), which may live in the hidden home. */
function atomicFiles(): string[] {
  return [process.execPath, ...(isCompiled() ? [] : [join(dirname(import.meta.dir), "..")])];
}

/** The endpoints (host:port) of the provider URLs given (unparsable or absent ones left out). */
export function sandboxEndpoints(...urls: (string | undefined)[]): string[] {
  return urls.map((u) => (u ? endpointOf(u) : undefined)).filter((e): e is string => e !== undefined);
}

/**
 * What running `program` needs to see, read-only: its file, or the whole
 * `node_modules` tree it is installed in (a CLI's script and its packages;
 * `.bin/` links point into it), and the same for the interpreter its `#!`
 * line names (`#!/usr/bin/env node` resolved on PATH). Without these a CLI
 * installed under the home or /tmp, both hidden, is "not found" (exit 127).
 */
export function programFiles(program: string | undefined, path: string | undefined, depth = 0): string[] {
  if (!program) return [];
  const found = program.includes("/") ? program : Bun.which(program, { PATH: path ?? "" });
  if (!found) return [];
  let real: string;
  try {
    real = realpathSync(found);
  } catch {
    return [];
  }
  const files = new Set([found, real].map(installRoot));
  const interpreter = depth === 0 ? shebang(real) : undefined;
  if (interpreter) for (const p of programFiles(interpreter, path, depth + 1)) files.add(p);
  return [...files];
}

/** The outermost `node_modules` folder holding `file`, or the file itself. */
function installRoot(file: string): string {
  const parts = file.split(sep);
  const i = parts.indexOf("node_modules");
  return i > 0 ? parts.slice(0, i + 1).join(sep) : file;
}

/** The interpreter a script's `#!` line runs (through `env`: the program it names), or undefined. */
function shebang(file: string): string | undefined {
  let head = "";
  try {
    const fd = openSync(file, "r");
    try {
      const buf = Buffer.alloc(256);
      head = buf.toString("utf8", 0, readSync(fd, buf, 0, 256, 0));
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
  if (!head.startsWith("#!")) return undefined;
  const words = head.slice(2).split("\n")[0]!.trim().split(/\s+/);
  if (words[0]?.endsWith("/env")) return words.slice(1).find((w) => !w.startsWith("-"));
  return words[0];
}

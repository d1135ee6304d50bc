/**
 * The `sandbox` option as a user writes it (on a stage, on `workflow({…})`
 * and in the config file) and what it resolves to: which network a stage
 * gets and which paths of the user's home it may read or write. Checked
 * here, before anything starts, so a mistake is one sentence and a hint.
 * How the sandbox is built from it: src/runners/sandbox/ and
 * docs/design/sandbox.md.
 *
 * `"off"`: no sandbox. `true`: the defaults (network "none" for a shell
 * stage, "provider" for an agent stage; nothing of the home). An object:
 * `network`, `read` and `write` (paths: absolute, or `~/…` in the user's
 * home; each must exist), `hosts` (more `host:port` the provider network
 * may reach). The nearest setting wins as a whole: the stage's, else the
 * workflow's, else the config's; none of them: the default, a sandbox with
 * the provider network for an agent stage (marked `byDefault`, so the error
 * where bubblewrap cannot make one says how to turn the default off) and
 * none for a shell stage.
 */

import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join, normalize, sep } from "node:path";
import { systemValue } from "./config/environment.ts";

export const SANDBOX_NETWORKS = ["none", "provider", "open"] as const;
export type SandboxNetwork = (typeof SANDBOX_NETWORKS)[number];

export type SandboxOption = "off" | true | { network?: SandboxNetwork; read?: string[]; write?: string[]; hosts?: string[] };

/** A resolved sandbox: plain data (it travels in the stage request to a worker). Paths are absolute. */
export interface SandboxSpec {
  network: SandboxNetwork;
  read: string[];
  write: string[];
  hosts: string[];
}

export interface SandboxProblem {
  message: string;
  hint: string;
}

const EXAMPLE = 'write sandbox: "off", true, or { network: "none" | "provider" | "open", read: ["~/.gitconfig"], write: [] }';

/**
 * Paths under the home that no stage ever sees, whatever it names: keys
 * and tokens of the user (the agent CLIs' own files are shown only to the
 * stage of that CLI: runners/sandbox/bwrap.ts).
 */
export const CREDENTIAL_PATHS = [
  ".ssh",
  ".aws",
  ".azure",
  ".config/gcloud",
  ".netrc",
  ".gnupg",
  ".git-credentials",
  ".config/gh",
  ".docker/config.json",
  ".kube",
  ".npmrc",
  ".pypirc",
  ".claude.json",
  ".claude/.credentials.json",
  ".codex/auth.json",
  ".gemini/oauth_creds.json",
  ".local/share/opencode/auth.json",
  ".pi/agent/auth.json",
] as const;

/** The option's shape, or a problem saying what is wrong with it (`where`: "stage \"x\"", "the workflow", "the config file"). */
export function checkSandboxOption(value: unknown, where: string): SandboxProblem | undefined {
  if (value === undefined || value === "off" || value === true) return undefined;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return { message: `${where}: sandbox must be "off", true or an object, not ${JSON.stringify(value)}`, hint: EXAMPLE };
  }
  const o = value as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (!["network", "read", "write", "hosts"].includes(k)) return { message: `${where}: sandbox has no option "${k}"`, hint: EXAMPLE };
  }
  if (o.network !== undefined && !(SANDBOX_NETWORKS as readonly unknown[]).includes(o.network)) {
    return { message: `${where}: sandbox network ${JSON.stringify(o.network)} is not one of none, provider, open`, hint: 'write network: "none" (no network), "provider" (only the model provider) or "open"' };
  }
  for (const k of ["read", "write", "hosts"] as const) {
    const list = o[k];
    if (list === undefined) continue;
    if (!Array.isArray(list) || list.some((x) => typeof x !== "string" || x === "")) {
      return { message: `${where}: sandbox ${k} must be an array of ${k === "hosts" ? "host:port strings" : "paths"}`, hint: k === "hosts" ? 'write hosts: ["api.example.com:443"]' : `write ${k}: ["~/.gitconfig"]` };
    }
    if (k === "hosts") {
      const bad = (list as string[]).find((h) => !/^[A-Za-z0-9.-]+:\d{1,5}$/.test(h));
      if (bad) return { message: `${where}: sandbox host ${JSON.stringify(bad)} is not host:port`, hint: 'write hosts: ["api.example.com:443"]' };
      continue;
    }
    for (const p of list as string[]) {
      if (!p.startsWith("~/") && !isAbsolute(p)) {
        return { message: `${where}: sandbox ${k} path ${JSON.stringify(p)} is relative`, hint: `write ~/${p} (in your home) or an absolute path; the stage's cwd is always writable` };
      }
    }
  }
  return undefined;
}

/** The home a stage's `~` means: $HOME, else the user's home. */
export function userHome(env: Record<string, string | undefined> = { HOME: systemValue("HOME") }): string {
  return env.HOME || homedir();
}

/**
 * The sandbox a stage gets, from the nearest setting that has one, else the default (see the header), or
 * undefined for none. Paths are expanded and must exist; a credential path is refused. Throws nothing: a
 * problem is returned.
 */
export function resolveSandbox(
  settings: readonly { value: unknown; where: string }[],
  agent: boolean,
  home = userHome(),
): { spec?: SandboxSpec; problem?: SandboxProblem; byDefault?: true } {
  const chosen = settings.find((s) => s.value !== undefined);
  if (!chosen) return agent ? { spec: { network: "provider", read: [], write: [], hosts: [] }, byDefault: true } : {};
  if (chosen.value === "off") return {};
  const problem = checkSandboxOption(chosen.value, chosen.where);
  if (problem) return { problem };
  const o = (chosen.value === true ? {} : chosen.value) as Exclude<SandboxOption, "off" | true>;
  const expand = (p: string) => normalize(p.startsWith("~/") ? join(home, p.slice(2)) : p).replace(/(.)\/+$/, "$1");
  const paths: Record<"read" | "write", string[]> = { read: [], write: [] };
  for (const k of ["read", "write"] as const) {
    for (const p of o[k] ?? []) {
      const full = expand(p);
      if (!existsSync(full)) {
        return { problem: { message: `${chosen.where}: sandbox ${k} path ${p} does not exist`, hint: `create it first, or leave it out of sandbox.${k}` } };
      }
      const secret = CREDENTIAL_PATHS.map((c) => join(home, c)).find((c) => full === c || full.startsWith(c + sep));
      if (secret) {
        return { problem: { message: `${chosen.where}: sandbox ${k} path ${p} holds credentials, which a sandboxed stage never sees`, hint: "pass what the stage needs through its env option instead" } };
      }
      paths[k].push(full);
    }
  }
  return { spec: { network: o.network ?? (agent ? "provider" : "none"), read: paths.read, write: paths.write, hosts: o.hosts ?? [] } };
}

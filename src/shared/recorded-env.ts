/**
 * The rules of a run's recorded environment (engine/run-environment.ts
 * records and applies it; docs/design/engine.md, "Versioning") that a
 * process below the engine needs too: a worker host's worker gives a
 * stage the environment of the run it belongs to (runners/stage-env.ts).
 *
 * A name is the driving process's own, never recorded nor replaced, when
 * it is one of atomic's settings (ATOMIC_* and every variable the registry
 * lists) or secret-named (KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL in
 * it, a known credential, a name the config lists in `secretVariables`).
 */

import { CREDENTIAL_VARIABLES, isRegistered } from "./config/environment.ts";

/** What `run_started` records of the environment. */
export interface RecordedEnvironment {
  env: Record<string, string>;
  /** The secret-named variables the run's process had (names only). */
  secrets: string[];
}

const SECRET_NAME = /KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL/i;
const CREDENTIALS = new Set<string>(CREDENTIAL_VARIABLES);

/** Whether a run never records `name`'s value (`listed`: the config's `secretVariables`). */
export function isSecretName(name: string, listed?: readonly string[]): boolean {
  return SECRET_NAME.test(name) || CREDENTIALS.has(name) || (listed?.includes(name) ?? false);
}

/** atomic's own settings: the driving process's, never recorded nor replaced. */
export function isAtomicSetting(name: string): boolean {
  return name.startsWith("ATOMIC_") || isRegistered(name);
}

/**
 * `base` (a process's environment, as a stage would inherit it) made the
 * run's: names the run did not have are removed, those it had are set as
 * they were; atomic's settings, secret-named names and the run's secrets'
 * names stay as `base` has them. A new object; `base` is left alone.
 */
export function overRecorded(base: Readonly<Record<string, string>>, recorded: RecordedEnvironment, listed?: readonly string[]): Record<string, string> {
  const secrets = new Set(recorded.secrets);
  const own = (n: string) => isAtomicSetting(n) || isSecretName(n, listed) || secrets.has(n);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(base)) if (own(k)) env[k] = v;
  for (const [k, v] of Object.entries(recorded.env)) if (!own(k)) env[k] = v;
  return env;
}

/**
 * A run's environment (docs/design/engine.md, "Versioning"): what a run
 * records of `process.env` when it starts, and what a later drive gives the
 * workflow instead of its own.
 *
 * At `run` time, once, the run records every variable of its process but
 * the secret-named ones (a name holding KEY, TOKEN, SECRET, PASSWORD or
 * CREDENTIAL, any credential atomic knows, and the names the config lists
 * in `secretVariables`), whose values are never stored: only their names;
 * so is a variable whose value holds a secret atomic knows or a URL with a
 * password in it (postgres://user:pw@host).
 * atomic's own settings are left out too (ATOMIC_* and every variable
 * of the registry in shared/config/environment.ts: HOME, PATH, the XDG
 * directories atomic reads (runtime, config, cache), PG*, OTEL_*, the
 * agent CLIs' homes; docs/reference/environment.md lists them): they
 * configure the process that drives the run, which keeps its own. Other
 * XDG variables (XDG_DATA_HOME, XDG_STATE_HOME) are the workflow's and are
 * recorded like any other; a stage on a worker host sees them as the run
 * did (the same path, whether or not it exists there).
 *
 * A resume (typed, or the service's recovery, which is `atomic resume`)
 * makes the recorded variables its environment before it loads the
 * workflow: variables the run did not have are removed, those it had are
 * set as they were. Secret-named variables come from the resuming process
 * itself; when the workflow (or a stage it starts) reads one the run had
 * but this process lacks, the read throws `missing_secret`, one sentence
 * naming it, and the run fails there (resumable once it is set). Stages
 * inherit the result, so they see what they saw when the run started.
 */

import { AtomicError } from "../shared/errors.ts";
import { holdsSecret } from "../shared/secrets.ts";
import { environmentSnapshot, pinEnvironment } from "../shared/config/environment.ts";
import { isAtomicSetting, isSecretName as secretName, type RecordedEnvironment } from "../shared/recorded-env.ts";
import type { AtomicConfig } from "../shared/config/schema.ts";

export type { RecordedEnvironment } from "../shared/recorded-env.ts";

/** Whether a run never records `name`'s value. */
export function isSecretName(name: string, config?: Pick<AtomicConfig, "secretVariables">): boolean {
  return secretName(name, config?.secretVariables);
}

/** A URL with a password in it: user:password@ after the scheme. */
const URL_PASSWORD = /^[a-z][a-z0-9+.-]*:\/\/[^/\s:@]*:[^/\s@]+@/i;

/** This process's environment as a new run records it. */
export function recordEnvironment(config?: Pick<AtomicConfig, "secretVariables">): RecordedEnvironment {
  const all = environmentSnapshot(isAtomicSetting);
  const secret = (n: string) => isSecretName(n, config) || URL_PASSWORD.test(all[n]!) || holdsSecret(all[n]!);
  const env: Record<string, string> = {};
  const secrets: string[] = [];
  for (const n of Object.keys(all).sort()) {
    if (secret(n)) secrets.push(n);
    else env[n] = all[n]!;
  }
  return { env, secrets };
}

/** The environment a run's `run_started` payload recorded, if it recorded one (runs before this did not). */
export function recordedEnvironment(payload: unknown): RecordedEnvironment | undefined {
  const p = payload as { env?: unknown; secrets?: unknown } | undefined;
  if (!p || typeof p.env !== "object" || p.env === null || !Array.isArray(p.secrets)) return undefined;
  return { env: p.env as Record<string, string>, secrets: p.secrets as string[] };
}

/** Gives this process (the workflow it drives, the stages it starts) the run's recorded environment. */
export function applyRecordedEnvironment(runId: string, recorded: RecordedEnvironment, config?: Pick<AtomicConfig, "secretVariables">): void {
  const secrets = new Set(recorded.secrets);
  pinEnvironment(
    recorded.env,
    (n) => isAtomicSetting(n) || isSecretName(n, config) || secrets.has(n),
    (n) =>
      secrets.has(n)
        ? new AtomicError("missing_secret", `the workflow reads ${n}, which run ${runId} had when it started but this process's environment lacks (secrets are never recorded)`, "terminal", {
            hint: `set ${n} in the environment of the process that resumes the run (for the service's recovery: the environment atomic serve was started with), then resume it`,
          })
        : undefined,
  );
}

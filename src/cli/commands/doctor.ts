/**
 * `atomic doctor`: which runners are usable here and why not, where the
 * config comes from, where the journal is (a Postgres URL without its
 * password) and whether it answers, where stage files go for other hosts
 * (the artifact store: a shared directory must be one this user may write
 * to), the default runner and model, admission limits and
 * the host's pressure right now, and whether a stage sandbox works here
 * (bubblewrap found and tried). It contacts no provider unless asked
 * (`--check-endpoint` lists the openai endpoint's models, with a short
 * timeout). Exit code 0 when the default runner, the journal and the
 * artifact store are usable (and the sandbox, when the config asks for
 * one), 1 otherwise.
 */

import { existsSync } from "node:fs";
import { defineCommand } from "citty";
import { defaultSlotsDir, loadConfig } from "../../shared/config/load.ts";
import type { AtomicConfig } from "../../shared/config/schema.ts";
import { CLI_AGENTS, checkRunner, defaultRunner, findBinary, openaiBaseUrl } from "../../runners/agent-setup.ts";
import { ADMISSION_DEFAULTS, hostPressure } from "../../engine/admission.ts";
import { admissionSlotsFile, openAdmissionSlots } from "../../journal/open.ts";
import { describeJournal } from "../../journal/open.ts";
import { describeArtifactStore } from "../../artifacts/select.ts";
import { session } from "../session.ts";
import { AGENT_NEEDS, versionNumber } from "../../runners/cli-agents/tested-versions.ts";
import { installedVersion } from "../../runners/cli-agents/installed-version.ts";
import { readEnv } from "../../shared/config/environment.ts";
import { bwrapPath, sandboxProblem } from "../../runners/sandbox/bwrap.ts";

interface RunnerReport {
  runner: string;
  usable: boolean;
  detail: string;
  problem?: string;
  hint?: string;
  /** CLI agents: the version found, the tested one, and what the CLI needs. */
  version?: string;
  /** The pinned version the tests run by default; testedVersions: every version they passed with. */
  testedVersion?: string;
  testedVersions?: string[];
  tested?: boolean;
  needs?: { keys: readonly string[]; keysSet: string[]; settings: string; settingsFound: boolean; note: string };
}

export default defineCommand({
  meta: { name: "doctor", description: "Say which runners are usable here and why not" },
  args: {
    checkEndpoint: { type: "boolean", description: "also ask the openai endpoint for its models (a network request)" },
  },
  async run({ args }) {
    const s = session();
    const { config, files } = loadConfig({ home: s.globals.home });
    const model = config.model;
    const runners: RunnerReport[] = [{ runner: "shell", usable: true, detail: "/bin/sh" }];
    runners.push(await openaiReport(config, args.checkEndpoint === true));
    // Asked all at once: a node-based CLI takes seconds to say its version on a busy host.
    const kinds = Object.keys(CLI_AGENTS);
    const lines = await Promise.all(kinds.map((kind) => (findBinary(kind, config).path ? versionOf(findBinary(kind, config).path!) : Promise.resolve(""))));
    for (const [i, kind] of kinds.entries()) {
      const problem = checkRunner(kind, config, model);
      const found = findBinary(kind, config);
      const needs = AGENT_NEEDS[kind];
      // A CLI that did not answer --version in time (seconds for a node-based one on a busy host) still has the
      // version its install names; the detail says it did not answer.
      const installed = found.path && !lines[i] ? installedVersion(kind, found.path) : undefined;
      const line = lines[i] || (installed ? `--version gave no answer within 15 s or failed; its install says ${installed}` : "");
      const version = versionNumber(lines[i]!) ?? installed;
      const about: Partial<RunnerReport> = needs
        ? {
            ...(version ? { version } : {}),
            testedVersion: needs.tested[0]!,
            testedVersions: [...needs.tested],
            ...(found.path ? { tested: version !== undefined && needs.tested.includes(version) } : {}),
            needs: { keys: needs.keys, keysSet: needs.keys.filter((k) => !!readEnv(k)), settings: needs.settings(), settingsFound: existsSync(needs.settings()), note: needs.note },
          }
        : {};
      runners.push(
        problem
          ? { runner: kind, usable: false, detail: found.wanted, problem: problem.message, ...(problem.hint ? { hint: problem.hint } : {}), ...about }
          : { runner: kind, usable: true, detail: `${found.path}${line ? ` (${line})` : ""}`, ...about },
      );
    }
    const def = defaultRunner(config);
    const pressure = hostPressure(config.admission);
    const slotsDir = config.admission?.slotsDir ?? defaultSlotsDir(s.globals.home);
    let sessionsHeld: number | undefined = 0;
    // A diagnosis creates nothing: no slots file yet means no session holds one.
    if (existsSync(admissionSlotsFile(slotsDir))) {
      try {
        const slots = openAdmissionSlots(slotsDir);
        sessionsHeld = (await slots.list()).length;
        slots.close();
      } catch {
        sessionsHeld = undefined;
      }
    }
    const admission = {
      maxSessionsPerRun: config.admission?.maxSessionsPerRun ?? ADMISSION_DEFAULTS.maxSessionsPerRun,
      maxSessionsPerUser: config.admission?.maxSessionsPerUser ?? ADMISSION_DEFAULTS.maxSessionsPerUser,
      sessionsHeld,
      slotsDir,
      loadPerCpu: Number(pressure.loadPerCpu.toFixed(2)),
      freeMemoryMb: Math.round(pressure.freeMemoryMb),
      pacing: pressure.reason ?? null,
    };
    const defaultUsable = runners.find((r) => r.runner === def)?.usable ?? false;
    const journal = await describeJournal({ home: s.globals.home, journalUrl: s.globals.journal });
    const artifacts = describeArtifactStore(config, !!s.globals.journal?.trim());
    const sandbox = sandboxReport(config);
    if (s.globals.json) {
      s.json({ configFiles: files, journal, artifacts, sandbox, defaultRunner: def, defaultModel: model ?? null, defaultUsable, runners, admission, budget: config.budget ?? null });
    } else {
      const st = s.style;
      s.result(`${st.bold("config")}     ${files.length ? files.join(", ") : "(none: defaults)"}`);
      s.result(`${st.bold("journal")}    ${journal.location} ${journal.ok ? st.dim(`(${journal.detail})`) : st.red(`(${journal.problem})`)}`);
      if (!journal.ok && journal.hint) s.result(`      ${st.dim(`hint: ${journal.hint}`)}`);
      s.result(`${st.bold("artifacts")}  ${artifacts.location ? `${artifacts.location} ` : ""}${artifacts.ok ? st.dim(`(${artifacts.detail})`) : st.red(`(${artifacts.problem})`)}`);
      if (!artifacts.ok && artifacts.hint) s.result(`      ${st.dim(`hint: ${artifacts.hint}`)}`);
      s.result(`${st.bold("sandbox")}    ${sandbox.usable ? `${st.green("works here")} ${st.dim(`(${sandbox.bwrap}, ${sandbox.version}; config default: ${sandbox.configDefault})`)}` : st.red(`(${sandbox.problem})`)}`);
      if (!sandbox.usable && sandbox.hint) s.result(`      ${st.dim(`hint: ${sandbox.hint}`)}`);
      s.result(`      ${sandbox.usable || sandbox.configDefault === "off" ? st.dim(sandbox.stages) : st.yellow(sandbox.stages)}`);
      s.result(`${st.bold("default")}    runner ${def}${defaultUsable ? "" : st.red(" (not usable here)")}, model ${model ?? st.dim("(none set)")}`);
      s.result(st.bold("runners"));
      for (const r of runners) {
        const mark = r.usable ? st.green("ok ") : st.red("no ");
        s.result(`  ${mark} ${r.runner.padEnd(9)} ${r.usable ? st.dim(r.detail) : r.problem}`);
        if (!r.usable && r.hint) s.result(`      ${st.dim(`hint: ${r.hint}`)}`);
        if (r.usable && r.testedVersion) {
          s.result(`      ${r.tested ? `version ${r.version}: the tested version` : st.yellow(`version ${r.version ?? "unknown"}: untested (atomic was tested with ${(r.testedVersions ?? [r.testedVersion]).join(", ")})`)}`);
        }
        if (r.usable && r.needs) {
          const n = r.needs;
          s.result(`      ${st.dim(`needs ${n.keys.join(" or ")} (${n.keysSet.length ? `set: ${n.keysSet.join(", ")}` : "none set"}), ${n.note}`)}`);
          s.result(`      ${st.dim(`settings ${n.settings} (${n.settingsFound ? "found" : "absent"})`)}`);
        }
      }
      s.result(st.bold("admission"));
      s.result(`  agent sessions: ${admission.maxSessionsPerRun} per run, ${admission.maxSessionsPerUser} per user (${sessionsHeld ?? "?"} held now)`);
      s.result(`  host: load per CPU ${admission.loadPerCpu}, free memory ${admission.freeMemoryMb} MB${pressure.reason ? st.yellow(`; stage starts are paced: ${pressure.reason}`) : ""}`);
      if (config.budget) s.result(`${st.bold("budget")}     ${JSON.stringify(config.budget)}`);
    }
    // A sandbox the config asks for, or the agent stages' default, must work here: else those stages fail.
    s.exitCode = defaultUsable && journal.ok && artifacts.ok && (sandbox.usable || sandbox.configDefault === "off") ? 0 : 1;
  },
});

/**
 * Whether bubblewrap can make a sandbox here (tried for real: runners/sandbox/bwrap.ts), the config's setting
 * ("default" when it names none: agent stages sandboxed, shell stages not) and what that means for the stages
 * that name no setting of their own (nor their workflow).
 */
function sandboxReport(config: AtomicConfig): { usable: boolean; bwrap: string | null; version: string | null; problem?: string; hint?: string; configDefault: string; stages: string } {
  const problem = sandboxProblem({ fresh: true });
  const bwrap = bwrapPath() ?? null;
  const version = bwrap ? Bun.spawnSync([bwrap, "--version"]).stdout.toString("utf8").trim() || null : null;
  const configDefault = config.sandbox === undefined ? "default" : config.sandbox === "off" ? "off" : JSON.stringify(config.sandbox);
  const stages =
    configDefault === "off"
      ? "stages run unsandboxed unless they or their workflow ask for a sandbox"
      : configDefault === "default"
        ? problem
          ? 'agent stages that name no sandbox fail here (they are sandboxed by default); set sandbox: "off" in the config to run them unsandboxed'
          : "agent stages run sandboxed (network: provider) unless they or their workflow say otherwise; shell stages run unsandboxed"
        : problem
          ? "every stage that names no sandbox of its own fails here: the config asks for one"
          : "every stage that names no sandbox of its own runs sandboxed, shell stages too";
  return { usable: !problem, bwrap, version, ...(problem ? { problem: problem.message, hint: problem.hint } : {}), configDefault, stages };
}

async function openaiReport(config: AtomicConfig, probe: boolean): Promise<RunnerReport> {
  const base = openaiBaseUrl(config);
  const problem = checkRunner("openai", config, config.model ?? "(any)");
  if (problem) return { runner: "openai", usable: false, detail: base, problem: problem.message, hint: problem.hint };
  const apiKey = readEnv("OPENAI_API_KEY");
  const key = apiKey ? "key from OPENAI_API_KEY" : "no key (local endpoint)";
  if (!probe) return { runner: "openai", usable: true, detail: `${base}, ${key}` };
  try {
    const res = await fetch(`${base.replace(/\/+$/, "")}/models`, {
      headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {},
      signal: AbortSignal.timeout(5_000),
    });
    if (!res.ok) return { runner: "openai", usable: false, detail: base, problem: `the endpoint answered HTTP ${res.status} to GET /models`, hint: "check the key and the base URL" };
    const body = (await res.json().catch(() => ({}))) as { data?: { id?: string }[] };
    const n = body.data?.length ?? 0;
    return { runner: "openai", usable: true, detail: `${base}, ${key}, ${n} model(s) listed` };
  } catch (err) {
    return { runner: "openai", usable: false, detail: base, problem: `cannot reach ${base} (${(err as Error).message})`, hint: "check ATOMIC_OPENAI_BASE_URL and the network" };
  }
}

/** The first line of `<binary> --version`, or "" when it does not answer within 15 s. */
async function versionOf(path: string): Promise<string> {
  try {
    const proc = Bun.spawn([path, "--version"], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    const timer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
    // pi says its version on stderr
    const [out, err] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
    const text = out.trim() ? out : err;
    await proc.exited;
    clearTimeout(timer);
    const line = text.trim().split("\n")[0]?.slice(0, 60);
    return line && proc.exitCode === 0 ? line : "";
  } catch {
    return "";
  }
}

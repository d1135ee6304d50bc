/**
 * Every help text of the command line, rendered here from the commands'
 * own argument definitions (citty's `renderUsage` right-aligns options,
 * prints citty's key names, repeats defaults and lists `--no-x` for every
 * boolean; it has no hook to change that, so this small renderer replaces
 * it). Layout, for `atomic --help` and `atomic <command> --help` alike:
 *
 *   atomic run: run a workflow file
 *
 *   USAGE
 *     atomic run FILE [options]
 *
 *   ARGUMENTS / OPTIONS / GLOBAL OPTIONS   (one aligned column of flags)
 *
 *   EXAMPLES
 *     atomic run ./review.ts --input dir=src
 *
 * Defaults are written once, in the option's description ("(default
 * 30000)"). A boolean that is on by default is shown as `--no-x`, the flag
 * that changes something. Descriptions wrap at the terminal's width. The
 * command reference (scripts/reference/pages/commands.ts) labels options with
 * `optionLabel` too.
 */

import type { ArgDef, ArgsDef, CommandDef } from "citty";
import { VERSION } from "../shared/version.ts";
import { GLOBAL_HELP } from "./globals.ts";
import type { Style } from "./style.ts";
import { terminalWidth } from "./table.ts";

export interface CommandHelp {
  summary: string;
  examples: readonly string[];
}

/** Placeholders for option values, by argument key (a definition's `valueHint` wins). */
const VALUE_HINTS: Record<string, string> = {
  input: "KEY=VALUE",
  inputsJson: "FILE",
  inputs: "FILE",
  leaseMs: "MS",
  workLeaseMs: "MS",
  workers: "N",
  maxCost: "USD",
  maxTokens: "N",
  maxDuration: "DURATION",
  port: "PORT",
  host: "ADDRESS",
  run: "RUN",
  dir: "DIR",
  stage: "NAME",
  status: "STATUS",
  workflow: "NAME",
  since: "WHEN",
  limit: "N",
  wait: "SECONDS",
  mode: "MODE",
  id: "ID",
  cwd: "DIR",
  maxRuns: "N",
  cron: "EXPR",
  tz: "ZONE",
  overlap: "POLICY",
  catchUp: "POLICY",
};

const EXIT_CODES = "Exit codes: 0 completed, 1 failed, 2 usage error, 3 blocked, 4 cancelled, 5 skipped, 130 interrupted.";

export function kebab(s: string): string {
  return s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

type Row = [label: string, description: string];

/** Rows with one aligned label column; a description wraps under itself. */
function section(title: string, rows: readonly Row[], style: Style, labelWidth: number): string[] {
  const width = Math.max(60, Math.min(terminalWidth() ?? 100, 120));
  const indent = 2 + labelWidth + 2;
  const out = [style.bold(title)];
  for (const [label, description] of rows) {
    const lines = wrap(description, Math.max(20, width - indent));
    if (label.length > labelWidth) {
      out.push(`  ${label}`);
      for (const l of lines) out.push(`${" ".repeat(indent)}${l}`);
    } else {
      out.push(`  ${label.padEnd(labelWidth)}  ${lines[0] ?? ""}`.trimEnd());
      for (const l of lines.slice(1)) out.push(`${" ".repeat(indent)}${l}`);
    }
  }
  return out;
}

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines;
}

const LABEL_CAP = 26;

function labelWidth(...groups: readonly (readonly Row[])[]): number {
  return Math.min(LABEL_CAP, Math.max(...groups.flat().map(([l]) => l.length)));
}

const GLOBAL_ROWS: readonly Row[] = GLOBAL_HELP.map(([flag, description]) => [flag, description]);

export function topHelp(commands: Record<string, CommandHelp>, style: Style): string {
  const cmds: Row[] = Object.entries(commands).map(([name, c]) => [name, c.summary]);
  const w = labelWidth(cmds, GLOBAL_ROWS);
  return [
    `atomic ${VERSION}: durable workflows for AI-agent pipelines`,
    "",
    style.bold("USAGE"),
    "  atomic <command> [options]",
    "",
    ...section("COMMANDS", cmds, style, w),
    "",
    ...section("GLOBAL OPTIONS", GLOBAL_ROWS, style, w),
    "",
    style.bold("EXAMPLES"),
    "  atomic run ./review.ts --input dir=src",
    "  atomic runs --status crashed",
    "  atomic resume 01m8rf",
    "",
    EXIT_CODES,
    "Run `atomic <command> --help` for a command's options and examples.",
  ].join("\n");
}

/** `FILE`, `[DIR]`, or the value hint (`FILE…` for any number of values). */
function positionalLabel(key: string, d: ArgDef): string {
  const label = ("valueHint" in d && d.valueHint) || key.toUpperCase();
  return d.required === false ? `[${label}]` : label;
}

export async function commandHelp(name: string, help: CommandHelp, cmd: CommandDef<ArgsDef>, style: Style): Promise<string> {
  const defs = ((typeof cmd.args === "function" ? await cmd.args() : cmd.args) ?? {}) as Record<string, ArgDef>;
  const entries = Object.entries(defs);
  const positionals = entries.filter(([, d]) => d.type === "positional");
  const options = entries.filter(([, d]) => d.type !== "positional");
  const usage = [
    `atomic ${name}`,
    ...positionals.map(([key, d]) => positionalLabel(key, d)),
    ...(options.length ? ["[options]"] : []),
  ].join(" ");
  const argRows: Row[] = positionals.map(([key, d]) => [("valueHint" in d && d.valueHint) || key.toUpperCase(), d.description ?? ""]);
  const optRows: Row[] = options.map(([key, d]) => [optionLabel(key, d), d.description ?? ""]);
  const w = labelWidth(argRows, optRows, GLOBAL_ROWS);
  const out = [`atomic ${name}: ${help.summary}`, "", style.bold("USAGE"), `  ${usage}`];
  if (argRows.length) out.push("", ...section("ARGUMENTS", argRows, style, w));
  if (optRows.length) out.push("", ...section("OPTIONS", optRows, style, w));
  out.push("", ...section("GLOBAL OPTIONS", GLOBAL_ROWS, style, w));
  if (help.examples.length) out.push("", style.bold("EXAMPLES"), ...help.examples.map((e) => `  ${e}`));
  return out.join("\n");
}

export function optionLabel(key: string, def: ArgDef): string {
  const aliases = "alias" in def && def.alias ? (Array.isArray(def.alias) ? def.alias : [def.alias]) : [];
  const short = aliases.filter((a) => a.length === 1).map((a) => `-${a}, `).join("");
  if (def.type === "boolean") return def.default === true ? `--no-${kebab(key)}` : `${short}--${kebab(key)}`;
  const hint = ("valueHint" in def && def.valueHint) || VALUE_HINTS[key] || "VALUE";
  return `${short}--${kebab(key)} ${hint}`;
}

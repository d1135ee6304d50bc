/**
 * docs/reference/commands.md: every command and flag, from the citty
 * definitions the binary runs (src/cli/command-table.ts's COMMANDS, each command's
 * `args`) and the global options (src/cli/globals.ts). Option labels are
 * the ones `atomic <command> --help` prints (help.ts's optionLabel).
 */

import type { ArgDef, ArgsDef, CommandDef } from "citty";
import { COMMANDS } from "../../../src/cli/command-table.ts";
import { GLOBAL_HELP } from "../../../src/cli/globals.ts";
import { kebab, optionLabel } from "../../../src/cli/help.ts";
import { anchorOf, cell, generatedBanner, type ReferencePage } from "../lib/pages.ts";

export interface CommandReference {
  name: string;
  summary: string;
  usage: string;
  positionals: { name: string; required: boolean; description: string }[];
  /** Each option's flags as typed: `--name`, and `--no-name` for a boolean on by default. */
  options: { label: string; flags: string[]; description: string }[];
  examples: readonly string[];
}

/** Every command with its arguments, as the command line defines them. */
export async function commandReference(): Promise<CommandReference[]> {
  const out: CommandReference[] = [];
  for (const [name, entry] of Object.entries(COMMANDS)) {
    const cmd = (await entry.load()) as CommandDef<ArgsDef>;
    const defs = ((typeof cmd.args === "function" ? await cmd.args() : cmd.args) ?? {}) as Record<string, ArgDef>;
    const entries = Object.entries(defs);
    const positionals = entries
      .filter(([, d]) => d.type === "positional")
      .map(([key, d]) => ({ name: key.toUpperCase(), required: d.required !== false, description: d.description ?? "" }));
    const options = entries
      .filter(([, d]) => d.type !== "positional")
      .map(([key, d]) => {
        const flag = d.type === "boolean" && d.default === true ? `--no-${kebab(key)}` : `--${kebab(key)}`;
        const aliases = "alias" in d && d.alias ? (Array.isArray(d.alias) ? d.alias : [d.alias]) : [];
        return { label: optionLabel(key, d), flags: [flag, ...aliases.map((a) => (a.length === 1 ? `-${a}` : `--${a}`))], description: d.description ?? "" };
      });
    const usage = [`atomic ${name}`, ...positionals.map((p) => (p.required ? p.name : `[${p.name}]`)), ...(options.length ? ["[options]"] : [])].join(" ");
    out.push({ name, summary: entry.summary, usage, positionals, options, examples: entry.examples });
  }
  return out;
}

/** The global options, as `atomic --help` lists them. */
export function globalOptions(): { label: string; flag: string; description: string }[] {
  return GLOBAL_HELP.map(([label, description]) => ({ label, flag: label.split(" ")[0]!, description }));
}

async function render(): Promise<string> {
  const commands = await commandReference();
  const lines: string[] = [
    generatedBanner("src/cli (the citty command definitions)"),
    "# Command reference",
    "",
    "Every command of `atomic` and every option it takes, as the binary defines them. `atomic <command> --help` prints the same. What the commands are for, with examples: [the command-line guide](../guides/command-line.md).",
    "",
    "Exit codes: 0 completed, 1 failed, 2 usage error, 3 blocked, 4 cancelled, 130 interrupted.",
    "",
    "## Contents",
    "",
    "- [Global options](#global-options)",
    ...commands.map((c) => `- [atomic ${c.name}](#${anchorOf(`atomic ${c.name}`)})`),
    "",
    "## Global options",
    "",
    "Accepted by every command, anywhere on the command line.",
    "",
    "| option | meaning |",
    "|---|---|",
    ...globalOptions().map((g) => `| \`${cell(g.label)}\` | ${cell(g.description)} |`),
  ];
  for (const c of commands) {
    lines.push("", `## atomic ${c.name}`, "", `${c.summary[0]!.toUpperCase()}${c.summary.slice(1)}.`, "", "```", c.usage, "```");
    if (c.positionals.length) {
      lines.push("", "| argument | meaning |", "|---|---|");
      for (const p of c.positionals) lines.push(`| \`${p.required ? p.name : `[${p.name}]`}\` | ${cell(p.description)} |`);
    }
    if (c.options.length) {
      lines.push("", "| option | meaning |", "|---|---|");
      for (const o of c.options) lines.push(`| \`${cell(o.label)}\` | ${cell(o.description)} |`);
    }
    if (c.examples.length) lines.push("", "Examples:", "", "```sh", ...c.examples, "```");
  }
  return `${lines.join("\n")}\n`;
}

const page: ReferencePage = { path: "docs/reference/commands.md", title: "every command and option", render };
export default page;

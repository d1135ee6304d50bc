/**
 * What the shell completions know, read from the command definitions
 * themselves: every command of the command table with its summary, its
 * flags (from its citty args: a string flag takes a value, a boolean one
 * does not; `--no-X` is offered for booleans that default to true) and what
 * its positional arguments are (a run id, a workflow, one of a few words),
 * plus the global flags. The bash, zsh and fish scripts are rendered from
 * this one description, so a new command or flag completes everywhere
 * without anyone writing it down twice.
 *
 * Direction: the command table is handed in (`completionSpec(commands)`),
 * never imported. The table lists `atomic completion` among its commands
 * and builds that command with itself (command-table.ts), so the files
 * depend one way only: command-table.ts -> commands/completion.ts ->
 * completion/*.ts (docs/design/layers.md).
 */

import type { ArgsDef, CommandDef } from "citty";
import { builtinNames } from "../../engine/builtins.ts";
import { BOOL_FLAGS, GLOBAL_HELP, VALUE_FLAGS } from "../globals.ts";
import { kebab, type CommandHelp } from "../help.ts";

/** What completion reads of a command of the table: its summary, and its citty definition (loaded on demand). */
export interface DescribedCommand extends Pick<CommandHelp, "summary"> {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each command has its own args type
  load: () => Promise<CommandDef<any>>;
}

export interface FlagSpec {
  /** Without dashes: "max-cost". */
  name: string;
  description: string;
  takesValue: boolean;
  /** The only values the flag takes, when there are few. */
  values?: readonly string[];
}

/** What a positional argument is: a run id (listed from `atomic runs`), a workflow (a builtin's name or a file), one of `values`, or anything. */
export type PositionalKind = "run" | "workflow" | "choice" | "other";

export interface PositionalSpec {
  name: string;
  kind: PositionalKind;
  values?: readonly string[];
}

export interface CommandSpec {
  name: string;
  summary: string;
  flags: FlagSpec[];
  positionals: PositionalSpec[];
}

export interface CompletionSpec {
  commands: CommandSpec[];
  globals: FlagSpec[];
  builtins: string[];
}

/** Flags whose values are a short fixed list. */
const FLAG_VALUES: Record<string, readonly string[]> = {
  durability: ["full", "normal"],
  mode: ["steer", "followUp", "interrupt"],
};

function positionalKind(command: string, key: string): PositionalSpec {
  if (key === "run") return { name: key, kind: "run" };
  if ((command === "run" && key === "file") || (command === "workflows" && key === "name") || (command === "schedule" && key === "workflow")) {
    return { name: key, kind: "workflow" };
  }
  return { name: key, kind: "other" };
}

/** The completion spec of `table`: every command of it, in its order, with the global flags and the builtin workflows. */
export async function completionSpec(table: Readonly<Record<string, DescribedCommand>>): Promise<CompletionSpec> {
  const commands: CommandSpec[] = [];
  for (const [name, entry] of Object.entries(table)) {
    const cmd = await entry.load();
    const defs: ArgsDef = (typeof cmd.args === "function" ? await cmd.args() : cmd.args) ?? {};
    const flags: FlagSpec[] = [];
    const positionals: PositionalSpec[] = [];
    for (const [key, def] of Object.entries(defs)) {
      const description = def.description ?? "";
      if (def.type === "positional") positionals.push(positionalKind(name, key));
      else if (def.type === "boolean") {
        flags.push({ name: kebab(key), description, takesValue: false });
        if (def.default === true) flags.push({ name: `no-${kebab(key)}`, description: `not: ${description}`, takesValue: false });
      } else {
        const values = FLAG_VALUES[key];
        flags.push({ name: kebab(key), description, takesValue: true, ...(values ? { values } : {}) });
      }
    }
    if (name === "schedule") {
      const { ACTIONS } = await import("../commands/schedule.ts");
      positionals[0] = { name: "action", kind: "choice", values: ACTIONS };
    }
    if (name === "completion") positionals[0] = { name: "shell", kind: "choice", values: SHELLS };
    commands.push({ name, summary: entry.summary, flags, positionals });
  }
  const describe = (flag: string) => GLOBAL_HELP.find(([usage]) => usage.split(" ")[0] === `--${flag}`)?.[1] ?? "";
  const globals: FlagSpec[] = [
    ...VALUE_FLAGS.map((f) => ({ name: f, description: describe(f), takesValue: true, ...(FLAG_VALUES[f] ? { values: FLAG_VALUES[f] } : {}) })),
    ...BOOL_FLAGS.map((f) => ({ name: f, description: describe(f), takesValue: false })),
    { name: "help", description: "show help", takesValue: false },
  ];
  return { commands, globals, builtins: builtinNames() };
}

export const SHELLS = ["bash", "zsh", "fish"] as const;
export type Shell = (typeof SHELLS)[number];

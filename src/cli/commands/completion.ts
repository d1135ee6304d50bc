/**
 * `atomic completion bash|zsh|fish`: prints the shell's completion script
 * (src/cli/completion/) for the commands of the table it is built with.
 * The command table makes this command with itself
 * (`completionCommand(COMMANDS)`), so this file never imports the table
 * that lists it: the dependencies run one way, table -> command ->
 * completion/ (docs/design/layers.md).
 */

import { defineCommand } from "citty";
import { UsageError } from "../../shared/errors.ts";
import { VERSION } from "../../shared/version.ts";
import { bashScript } from "../completion/bash.ts";
import { fishScript } from "../completion/fish.ts";
import { completionSpec, SHELLS, type DescribedCommand, type Shell } from "../completion/spec.ts";
import { zshScript } from "../completion/zsh.ts";
import { out } from "../output.ts";

const RENDER: Record<Shell, typeof bashScript> = { bash: bashScript, zsh: zshScript, fish: fishScript };

/** The `completion` command, describing every command of `table` (completion itself among them). */
export function completionCommand(table: Readonly<Record<string, DescribedCommand>>) {
  return defineCommand({
    meta: { name: "completion", description: "Print a shell completion script" },
    args: {
      shell: { type: "positional", description: `the shell: ${SHELLS.join(", ")}`, required: true },
    },
    async run({ args }) {
      const shell = args.shell as Shell;
      if (!SHELLS.includes(shell)) {
        throw new UsageError("bad_argument", `atomic completion knows ${SHELLS.join(", ")}, not ${JSON.stringify(args.shell)}`, {
          hint: "e.g. atomic completion bash > ~/.local/share/bash-completion/completions/atomic",
        });
      }
      out(RENDER[shell](await completionSpec(table), VERSION));
    },
  });
}

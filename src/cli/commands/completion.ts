/** `atomic completion bash|zsh|fish`: prints the shell's completion script (src/cli/completion/). */

import { defineCommand } from "citty";
import { UsageError } from "../../shared/errors.ts";
import { VERSION } from "../../shared/version.ts";
import { bashScript } from "../completion/bash.ts";
import { fishScript } from "../completion/fish.ts";
import { completionSpec, SHELLS, type Shell } from "../completion/spec.ts";
import { zshScript } from "../completion/zsh.ts";
import { out } from "../output.ts";

const RENDER: Record<Shell, typeof bashScript> = { bash: bashScript, zsh: zshScript, fish: fishScript };

export default defineCommand({
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
    out(RENDER[shell](await completionSpec(), VERSION));
  },
});

/**
 * `atomic completion bash|zsh|fish` with the real shells: the bash script is
 * sourced into bash, found through `complete -p atomic`, and asked for the
 * completions of command lines (commands, a command's flags, a flag's
 * values, run ids of a real run in the home, builtins and files, a value of
 * a global flag that is not mistaken for the command); fish is asked the same
 * with its own `complete -C`; zsh's script is checked for syntax and loaded
 * by compinit from fpath (zsh has no non-interactive way to ask for
 * completions). Every command of `atomic --help` completes. Bad input: an
 * unknown shell is one sentence and a hint.
 */

import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { atomicBin, childEnv, ROOT, runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const home = makeTempDir();
const dir = makeTempDir();
afterAll(removeTempDirs);
let runId = "";

beforeAll(async () => {
  for (const shell of ["bash", "zsh", "fish"]) {
    const r = await runAtomic(["completion", shell], { home });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    writeFileSync(join(dir, `atomic.${shell}`), r.stdout);
  }
  const run = await runAtomic(["run", join(ROOT, "examples", "review.ts"), "--input", "dir=src", "--input", "depth=1", "--json"], { home });
  expect(run.code).toBe(0);
  runId = JSON.parse(run.stdout.trim().split("\n").at(-1)!).runId;
}, 120_000);

/** The binary's folder first on PATH, so the scripts' plain `atomic` is this build. */
const env = () => childEnv({ PATH: `${dirname(atomicBin())}:${process.env.PATH}`, ATOMIC_HOME: home, NO_COLOR: "1", ATOMIC_JOURNAL: undefined });

async function shell(argv: string[], cwd = dir): Promise<string> {
  const p = Bun.spawn(argv, { cwd, env: env(), stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${argv[0]} exited ${code}: ${err}`);
  return out;
}

/** bash's completions for the words of a command line (the last word is the one being completed). */
async function bashComplete(...words: string[]): Promise<string[]> {
  const quoted = words.map((w) => `'${w}'`).join(" ");
  const script = [
    `source ${join(dir, "atomic.bash")}`,
    `fn=$(complete -p atomic | sed -E 's/.* -F ([^ ]+) .*/\\1/')`,
    `COMP_WORDS=(${quoted}); COMP_CWORD=${words.length - 1}; COMP_LINE="\${COMP_WORDS[*]}"; COMP_POINT=\${#COMP_LINE}`,
    `"$fn" atomic "\${COMP_WORDS[COMP_CWORD]}" "\${COMP_WORDS[COMP_CWORD-1]}"`,
    `printf '%s\\n' "\${COMPREPLY[@]}"`,
  ].join("\n");
  return (await shell(["bash", "--norc", "--noprofile", "-c", script])).split("\n").filter(Boolean).sort();
}

async function fishComplete(line: string): Promise<string[]> {
  const out = await shell(["fish", "--no-config", "-c", `source ${join(dir, "atomic.fish")}; complete -C '${line}'`]);
  return out.split("\n").filter(Boolean).map((l) => l.split("\t")[0]!).sort();
}

test("bash: the script registers with complete and completes commands, flags, values, run ids, builtins and files", async () => {
  const registered = await shell(["bash", "--norc", "--noprofile", "-c", `source ${join(dir, "atomic.bash")}; complete -p atomic`]);
  expect(registered.trim()).toBe("complete -o default -F _atomic atomic");
  expect(await bashComplete("atomic", "ru")).toEqual(["run", "runs"]);
  // a global flag's value is not the command
  expect(await bashComplete("atomic", "--home", "somewhere", "re")).toEqual(["replay", "rerun", "resume", "review"]);
  expect(await bashComplete("atomic", "run", "x.ts", "--max-")).toEqual(["--max-cost", "--max-duration", "--max-tokens"]);
  expect(await bashComplete("atomic", "--durability", "")).toEqual(["full", "normal"]);
  expect(await bashComplete("atomic", "send", "r", "s", "t", "--mode", "")).toEqual(["followUp", "interrupt", "steer"]);
  expect(await bashComplete("atomic", "schedule", "")).toEqual(["add", "delete", "list", "pause", "show", "trigger", "unpause"]);
  expect(await bashComplete("atomic", "completion", "")).toEqual(["bash", "fish", "zsh"]);
  expect(await bashComplete("atomic", "serve", "--no-")).toEqual(["--no-color", "--no-recover", "--no-schedules"]);
  // run ids come from the home's journal, through the same binary
  expect(await bashComplete("atomic", "resume", "")).toEqual([runId]);
  expect(await bashComplete("atomic", "show", runId.slice(0, 4))).toEqual([runId]);
  // only the first positional of show is a run id
  expect(await bashComplete("atomic", "answer", runId, "")).toEqual([]);
  // a workflow: builtins and files
  writeFileSync(join(dir, "good.ts"), "");
  expect(await bashComplete("atomic", "run", "go")).toEqual(["goal", "good.ts"]);
});

test("bash: every command of atomic --help completes", async () => {
  const help = await runAtomic(["--help"], { home });
  const commands = [...help.stdout.matchAll(/^ {2}([a-z]+) {2,}\S/gm)].map((m) => m[1]!).sort();
  expect(commands.length).toBeGreaterThanOrEqual(16);
  expect(await bashComplete("atomic", "")).toEqual(commands);
});

test("fish: commands, flags with values, run ids and builtins", async () => {
  expect(await fishComplete("atomic ru")).toEqual(["run", "runs"]);
  expect(await fishComplete("atomic run x.ts --max-")).toEqual(["--max-cost", "--max-duration", "--max-tokens"]);
  expect(await fishComplete("atomic --durability ")).toEqual(["full", "normal"]);
  expect(await fishComplete("atomic resume ")).toContain(runId);
  expect(await fishComplete("atomic run go")).toContain("goal");
});

test("zsh: the script parses and compinit loads it from fpath for atomic", async () => {
  const fpath = join(dir, "zfunc");
  mkdirSync(fpath, { recursive: true });
  writeFileSync(join(fpath, "_atomic"), await Bun.file(join(dir, "atomic.zsh")).text());
  await shell(["zsh", "-n", join(fpath, "_atomic")]);
  const out = await shell(["zsh", "-f", "-c", `fpath=(${fpath} $fpath); autoload -Uz compinit; compinit -u -d ${join(dir, "zcompdump")}; print -r -- $_comps[atomic]`]);
  expect(out.trim()).toBe("_atomic");
});

test("an unknown shell is one sentence and a hint", async () => {
  const r = await runAtomic(["completion", "tcsh"], { home });
  expect(r.code).toBe(2);
  expect(r.stdout).toBe("");
  expect(r.stderr).toBe('error: atomic completion knows bash, zsh, fish, not "tcsh".\nhint: e.g. atomic completion bash > ~/.local/share/bash-completion/completions/atomic\n');
});

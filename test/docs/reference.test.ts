/**
 * The reference under docs/reference/ is what the code says:
 * `scripts/reference/generate.ts --check` finds no stale page, and every
 * command and every option the built binary's help lists (`atomic --help`,
 * `atomic <command> --help`) is in docs/reference/commands.md, in that
 * command's section. And the other way: every `--flag` the README and the
 * guides write after `atomic <command>` is an option of that command (or a
 * global one). Every key of the config schema is in
 * docs/reference/config.md and every variable of the environment registry
 * in docs/reference/environment.md.
 */

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, atomicBin } from "../../scripts/binary.ts";
import { COMMANDS } from "../../src/cli/command-table.ts";
import { commandReference, globalOptions } from "../../scripts/reference/pages/commands.ts";
import { documentationFiles } from "./markdown.ts";
import { describeConfig } from "../../src/shared/config/schema.ts";
import { VARIABLES } from "../../src/shared/config/environment.ts";
import { childEnv } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

const reference = () => readFileSync(join(ROOT, "docs", "reference", "commands.md"), "utf8");

/** The part of the command reference about one command (from its heading to the next). */
function section(text: string, command: string): string {
  const start = text.indexOf(`\n## atomic ${command}\n`);
  if (start < 0) return "";
  const next = text.indexOf("\n## ", start + 1);
  return text.slice(start, next < 0 ? undefined : next);
}

/** The flags a help text lists under a heading (OPTIONS, GLOBAL OPTIONS). */
function flagsUnder(help: string, heading: string): string[] {
  const lines = help.split("\n");
  const at = lines.indexOf(heading);
  if (at < 0) return [];
  const flags: string[] = [];
  for (const line of lines.slice(at + 1)) {
    if (!line.startsWith("  ")) break;
    const m = /^ {2}(?:-\w, )?(--[a-z][a-z-]*)/.exec(line);
    if (m) flags.push(m[1]!);
  }
  return flags;
}

/** Whether `flag` is written in a code span of `text` (`--flag VALUE`, `-f, --flag`). */
function inCode(text: string, flag: string): boolean {
  return new RegExp(`\`[^\`\n]*${flag}(?![a-z-])[^\`\n]*\``).test(text);
}

function help(args: string[]): string {
  const home = makeTempDir("atomic-docs-home-");
  const r = Bun.spawnSync([atomicBin(), ...args, "--help"], { env: childEnv({ ATOMIC_HOME: home, NO_COLOR: "1", COLUMNS: "200" }), stdout: "pipe", stderr: "pipe" });
  removeTempDirs();
  expect(r.exitCode).toBe(0);
  return r.stdout.toString();
}

describe("the reference", () => {
  test("generate.ts --check: no page is stale", () => {
    const r = Bun.spawnSync([process.execPath, join(ROOT, "scripts", "reference", "generate.ts"), "--check"], { cwd: ROOT, env: childEnv(), stdout: "pipe", stderr: "pipe" });
    expect(r.stderr.toString()).toBe("");
    expect(r.exitCode).toBe(0);
  }, 120_000);

  test("every command of atomic --help and every global option is in the command reference", () => {
    const top = help([]);
    const listed = flagsUnder(top, "GLOBAL OPTIONS");
    expect(listed.length).toBeGreaterThan(5);
    const text = reference();
    const globals = text.slice(text.indexOf("\n## Global options\n"), text.indexOf("\n## atomic "));
    for (const flag of listed) expect(inCode(globals, flag)).toBe(true);
    const commands = top.slice(top.indexOf("COMMANDS"), top.indexOf("GLOBAL OPTIONS")).split("\n").map((l) => /^ {2}([a-z]+)\b/.exec(l)?.[1]).filter((c): c is string => !!c);
    expect(commands.sort()).toEqual(Object.keys(COMMANDS).sort());
    for (const c of commands) expect(section(text, c)).not.toBe("");
  });

  for (const name of Object.keys(COMMANDS)) {
    test(`atomic ${name}: every option its help lists is in its section of the reference`, () => {
      const flags = flagsUnder(help([name]), "OPTIONS");
      const own = section(reference(), name);
      expect(own).not.toBe("");
      const missing = flags.filter((f) => !inCode(own, f));
      expect(missing).toEqual([]);
    });
  }

  test("every flag the README and the guides give a command is one of its options", async () => {
    const options = new Map((await commandReference()).map((c) => [c.name, new Set(c.options.flatMap((o) => o.flags))]));
    const globals = new Set([...globalOptions().map((g) => g.flag), "--help", "--version"]);
    const wrong: string[] = [];
    let checked = 0;
    for (const file of documentationFiles().filter((f) => !f.startsWith("docs/reference/"))) {
      const text = readFileSync(join(ROOT, file), "utf8");
      for (const m of text.matchAll(/\batomic ([a-z]+)([^`\n|]*)/g)) {
        const own = options.get(m[1]!);
        if (!own) continue;
        for (const f of m[2]!.matchAll(/(?<![\w-])(--[a-z][a-z-]*)/g)) {
          checked++;
          if (!globals.has(f[1]!) && !own.has(f[1]!)) wrong.push(`${file}: atomic ${m[1]} has no option ${f[1]} (${m[0].trim().slice(0, 80)})`);
        }
      }
    }
    expect(wrong).toEqual([]);
    expect(checked).toBeGreaterThan(50);
  });

  test("every key of the config schema is in the configuration reference, with its type (a section as a heading)", () => {
    const text = readFileSync(join(ROOT, "docs", "reference", "config.md"), "utf8");
    const keys = describeConfig();
    expect(keys.length).toBeGreaterThan(20);
    const missing = keys.filter((k) => !text.includes(`| \`${k.path}\` | ${k.type} |`) && !text.includes(`\n## ${k.path}\n`)).map((k) => k.path);
    expect(missing).toEqual([]);
  });

  test("every variable of the environment registry is in the environment reference", () => {
    const text = readFileSync(join(ROOT, "docs", "reference", "environment.md"), "utf8");
    const missing = Object.keys(VARIABLES).filter((name) => !text.includes(`| \`${name}\` |`));
    expect(Object.keys(VARIABLES).length).toBeGreaterThan(40);
    expect(missing).toEqual([]);
  });

  test("the section finder and the flag reader see what they should", () => {
    const text = "# x\n\n## atomic run\n\n| `--input KEY=VALUE` | x |\n\n## atomic runs\n\n| `--watch` | y |\n";
    expect(section(text, "run")).toContain("--input");
    expect(section(text, "run")).not.toContain("--watch");
    expect(inCode("| `-f, --follow` | x |", "--follow")).toBe(true);
    expect(inCode("| `--follow-up` | x |", "--follow")).toBe(false);
    expect(flagsUnder("OPTIONS\n  --input KEY=VALUE  an input\n  -s, --slots N  slots\n\nGLOBAL OPTIONS\n  --json  x", "OPTIONS")).toEqual(["--input", "--slots"]);
  });
});

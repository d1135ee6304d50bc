/**
 * docs/reference/config.md: every key of the config file, from the valibot
 * schema the loader checks files against (src/shared/config/schema.ts):
 * its type, default, unit and description.
 */

import * as v from "valibot";
import { ConfigSchema, describeConfig, type DescribedKey } from "../../../src/shared/config/schema.ts";
import { cell, generatedBanner, type ReferencePage } from "../lib/pages.ts";

const EXAMPLE = {
  runner: "openai",
  model: "gpt-4o-mini",
  openai: { baseUrl: "http://localhost:11434/v1", maxRetries: 4 },
  runners: { claude: { path: "/opt/claude/bin/claude", args: ["--verbose"] } },
  pricing: { "gpt-4o-mini": { inputPerMTok: 0.15, outputPerMTok: 0.6 } },
  admission: { maxSessionsPerRun: 4 },
  budget: { maxCostUsd: 5, warnAtPercent: 80 },
  retention: { olderThan: "30d" },
  artifacts: { dir: "/mnt/shared/atomic" },
  service: { workflowDirs: ["/srv/workflows"] },
};

function row(k: DescribedKey): string {
  return `| \`${cell(k.path)}\` | ${cell(k.type)} | ${k.default === undefined ? "" : cell(k.default)} | ${cell(k.unit ?? "")} | ${cell(k.description)} |`;
}

function render(): string {
  // The example on the page is one the loader accepts.
  v.parse(ConfigSchema, EXAMPLE);
  const keys = describeConfig();
  const top = keys.filter((k) => !k.path.includes("."));
  const sections = top.filter((k) => keys.some((x) => x.path.startsWith(`${k.path}.`)));
  const header = ["| key | must be | default | unit | meaning |", "|---|---|---|---|---|"];
  const lines = [
    generatedBanner("src/shared/config/schema.ts (the config file's schema)"),
    "# Configuration reference",
    "",
    "atomic reads `$ATOMIC_HOME/config.json`, then `.atomic/config.json` in the project (the current directory), then the file `ATOMIC_CONFIG` names. A later file wins key by key; sections (`openai`, `admission`, …) merge one level deep, so `runners.claude` in the project replaces the home's `runners.claude`. Then `ATOMIC_RUNNER`, `ATOMIC_MODEL` and `ATOMIC_OPENAI_BASE_URL` override `runner`, `model` and `openai.baseUrl` ([environment variables](environment.md)).",
    "",
    "Every key is optional, and a key atomic does not know is ignored, so a newer config works with an older atomic. A value of the wrong type stops the command (exit 2) with one sentence naming the file and the key:",
    "",
    "```",
    'error: "openai.maxRetries" in /home/me/.atomic/config.json must be a number, at least 0.',
    "hint: see docs/reference/config.md for every key, its type and default",
    "```",
    "",
    "An example:",
    "",
    "```json",
    JSON.stringify(EXAMPLE, null, 2),
    "```",
    "",
    "`<name>` in a key stands for a name of your choosing: a runner (`runners.claude`) or a model (`pricing.gpt-4o`).",
    "",
    "## Contents",
    "",
    "- [Top-level keys](#top-level-keys)",
    ...sections.map((s) => `- [${s.path}](#${s.path})`),
    "",
    "## Top-level keys",
    "",
    ...header,
    ...top.filter((k) => !sections.includes(k)).map(row),
  ];
  for (const s of sections) {
    lines.push("", `## ${s.path}`, "", s.description, "", ...header, ...keys.filter((k) => k.path.startsWith(`${s.path}.`)).map(row));
  }
  return `${lines.join("\n")}\n`;
}

const page: ReferencePage = { path: "docs/reference/config.md", title: "every key of the config file", render };
export default page;

/**
 * docs/reference/environment.md: every environment variable atomic reads
 * or sets, from the registry that is the only reader of the environment
 * (src/shared/config/environment.ts), grouped by audience: settings,
 * variables set for stages, credentials, other programs' variables, and
 * the internal hand-offs between atomic's processes (listed as such).
 */

import { VARIABLES, type Audience, type Variable } from "../../../src/shared/config/environment.ts";
import { cell, generatedBanner, type ReferencePage } from "../lib/pages.ts";

const SECTIONS: { audience: Audience; title: string; anchor: string; intro: string }[] = [
  { audience: "user", title: "Settings", anchor: "settings", intro: "atomic's own settings. Most have a flag or a config key beside them; a flag wins over its variable." },
  {
    audience: "stage",
    title: "Set for stages",
    anchor: "set-for-stages",
    intro: "Every stage process (a shell stage, the openai runner's `bash` tool, a CLI agent and what they start) gets these; a stage's `env` option cannot override them.",
  },
  {
    audience: "credential",
    title: "Credentials",
    anchor: "credentials",
    intro:
      "Keys and passwords, and `ATOMIC_JOURNAL` (a journal URL may carry a password; it is listed under settings). A stage does not see them unless its `env` option names them (`env: { OPENAI_API_KEY: true }` passes atomic's own value); a CLI agent gets the ones its CLI needs. Their values are redacted from logs, transcripts, journal records and error messages.",
  },
  {
    audience: "external",
    title: "Read from the system and other programs",
    anchor: "read-from-the-system-and-other-programs",
    intro: "Variables that belong to the system or to another program and that atomic reads too. The Postgres driver also reads libpq's other variables itself.",
  },
  {
    audience: "internal",
    title: "Internal hand-offs",
    anchor: "internal-hand-offs",
    intro: "Set by one atomic process for another it starts. They are listed so that nothing in an environment is a mystery; never set them yourself.",
  },
  { audience: "testing", title: "Tests and debugging", anchor: "tests-and-debugging", intro: "Hooks for atomic's own tests, benchmarks and debugging; not settings." },
];

function render(): string {
  const entries = Object.entries(VARIABLES) as [string, Variable<unknown>][];
  const lines = [
    generatedBanner("src/shared/config/environment.ts (the registry of environment variables)"),
    "# Environment variables",
    "",
    "Every variable atomic reads or sets. Everything else in atomic's environment passes through unchanged: atomic's own processes (pool coordinator, workers, the service's drives) inherit the whole environment, the intercom broker all of it but what ties a process to one run (`ATOMIC_ROOT_RUN_ID`, `ATOMIC_WORKER_ID`, `ATOMIC_GUARD`, `ATOMIC_FAULT_POINTS`: it serves every run), and stages inherit all of it but the [credentials](#credentials) and the internal configuration marked *kept from stages*. The config file's keys: [configuration reference](config.md).",
    "",
    "A value that does not parse (a number of milliseconds that is not one) counts as unset; an empty value is unset.",
    "",
    "## Contents",
    "",
    ...SECTIONS.map((s) => `- [${s.title}](#${s.anchor})`),
  ];
  for (const s of SECTIONS) {
    lines.push("", `## ${s.title}`, "", s.intro, "", "| variable | value | default | meaning |", "|---|---|---|---|");
    for (const [name, v] of entries.filter(([, x]) => x.audience === s.audience)) {
      const kept = v.keptFromStages && s.audience !== "credential" ? " Kept from stages." : "";
      lines.push(`| \`${name}\` | ${cell(v.type)} | ${cell(v.default ?? "")} | ${cell(v.description + kept)} |`);
    }
  }
  return `${lines.join("\n")}\n`;
}

const page: ReferencePage = { path: "docs/reference/environment.md", title: "every environment variable", render };
export default page;

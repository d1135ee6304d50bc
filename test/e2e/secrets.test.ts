/**
 * Credentials through the real binary (README "Security"): the keys atomic
 * uses reach no stage unless it names them in `env`; known secret values
 * are redacted from transcripts, journal records and what the CLI prints;
 * no process of a run carries a secret or its configuration in argv.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { writeFakeCli } from "../helpers/fake-cli.ts";
import { filesUnder, makeTempDir } from "../helpers/temp.ts";
import { inOrder, startFakeOpenAI, text, toolCall, type FakeOpenAI } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "./support.ts";
import { intercomPaths } from "../../src/intercom/paths.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const KEY = `sk-secret-${randomBytes(12).toString("hex")}`;
const OTHER_KEY = `sk-ant-${randomBytes(12).toString("hex")}`;
const PG_PASSWORD = `pg-${randomBytes(12).toString("hex")}`;
/** What atomic's own environment holds in these tests: its credentials and one ordinary variable. */
const SECRET_ENV = { OPENAI_API_KEY: KEY, ANTHROPIC_API_KEY: OTHER_KEY, PGPASSWORD: PG_PASSWORD, KEEP_ME: "visible" };

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

function workflowFile(body: string): string {
  const file = join(makeTempDir("atomic-secrets-wf-"), "wf.ts");
  writeFileSync(file, `import { workflow } from "atomic";\nexport default workflow(${body});\n`);
  return file;
}

/** The journal's bytes (the database and its WAL), for "never stored" checks. */
function journalBytes(home: string): string {
  return ["atomic.db", "atomic.db-wal"]
    .map((f) => join(home, f))
    .filter(existsSync)
    .map((f) => readFileSync(f).toString("latin1"))
    .join("");
}

const lastJson = (stdout: string) => JSON.parse(stdout.trim().split("\n").at(-1)!);

const ENV_WORKFLOW = `{
  name: "env-seen",
  async run(ctx) {
    const plain = await ctx.shell("plain", "env");
    const named = await ctx.shell("named", 'printf %s "$OPENAI_API_KEY" | sha256sum', { env: { OPENAI_API_KEY: true } });
    const given = await ctx.shell("given", 'printf %s "$PGPASSWORD"', { env: { PGPASSWORD: "chosen-by-the-workflow" } });
    const leak = await ctx.shell("leak", "printenv OPENAI_API_KEY", { env: { OPENAI_API_KEY: true } });
    // The environment of its starter's group guard (a shell: /proc shows it to the stage, as it shows root's everything), once it runs.
    // Other tests' guards may exit between grep and tr: a vanished /proc file is skipped, not a failure.
    const guard = await ctx.shell("guard", "until grep -qs ATOMIC_GUARD_NEEDLE= /proc/[0-9]*/environ; do sleep 0.05; done; for f in $(grep -l ATOMIC_GUARD_NEEDLE= /proc/[0-9]*/environ 2>/dev/null); do tr '\\\\0' '\\\\n' < $f 2>/dev/null; done; true");
    return { plain: plain.outputPath, named: named.text.split(" ")[0], given: given.text, leak: leak.text, leakOut: leak.outputPath, guard: guard.outputPath };
  },
}`;

for (const mode of [["--workers", "1"], ["--in-process"]]) {
  e2eTest(`a shell stage sees none of atomic's credentials unless its env names them (${mode[0]})`, async () => {
    const home = makeTempDir("atomic-secrets-home-");
    const r = await runAtomic(["run", workflowFile(ENV_WORKFLOW), "--json", ...mode], { home, env: SECRET_ENV });
    expect(r.code).toBe(0);
    const out = lastJson(r.stdout).outputs;
    // What the stage itself wrote (its stdout file is not redacted): the variables were not there.
    const env = readFileSync(out.plain, "utf8");
    expect(env).toContain("KEEP_ME=visible");
    expect(env).toContain("ATOMIC_RUN_ID=");
    for (const name of ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PGPASSWORD", "ATOMIC_POOL_CONFIG"]) expect(env).not.toContain(`${name}=`);
    for (const value of [KEY, OTHER_KEY, PG_PASSWORD]) expect(env).not.toContain(value);
    // Nor in its starter's group guard, which is no atomic process (those are not dumpable: non-dumpable.test.ts).
    const guard = readFileSync(out.guard, "utf8");
    expect(guard).toContain("ATOMIC_GUARD_NEEDLE=");
    expect(guard).not.toContain("KEEP_ME=");
    for (const value of [KEY, OTHER_KEY, PG_PASSWORD]) expect(guard).not.toContain(value);
    // Named with `true`: the stage got atomic's own value, which never appears in the journal.
    expect(out.named).toBe(sha256(KEY));
    expect(out.given).toBe("chosen-by-the-workflow");
    // A stage that prints the key: its own stdout file has it; its text, the journal and `logs` do not.
    expect(readFileSync(out.leakOut, "utf8")).toBe(`${KEY}\n`);
    expect(out.leak).toBe("[redacted]\n");
    expect(journalBytes(home)).not.toContain(KEY);
    const logs = await runAtomic(["logs", lastJson(r.stdout).runId, "--stage", "leak"], { home, env: SECRET_ENV });
    expect(logs.stdout).toBe("[redacted]\n");
  });
}

e2eTest("an env value that is neither a string nor true fails the stage before it starts, naming the key", async () => {
  const home = makeTempDir("atomic-secrets-home-");
  const marker = join(makeTempDir("atomic-secrets-mark-"), "ran");
  const wf = workflowFile(`{ name: "bad-env", async run(ctx) { await ctx.shell("a", "touch ${marker}", { env: { PORT: 8080 } }); } }`);
  const r = await runAtomic(["run", wf, "--workers", "1"], { home });
  expect(r.code).toBe(1);
  expect(r.stderr).toContain('stage "a": env.PORT must be a string, or true to pass atomic\'s own PORT');
  expect(r.stderr).toContain('hint: write env: { PORT: "value" }, or env: { PORT: true }');
  expect(r.stderr).not.toMatch(/^\s+at /m);
  expect(existsSync(marker)).toBe(false);
});

e2eTest("the openai runner's bash tool sees no key; a stage that names it does; transcripts show [redacted]", async () => {
  const server: FakeOpenAI = await startFakeOpenAI(
    inOrder(toolCall("bash", { command: "env" }), text("done"), toolCall("bash", { command: "printenv OPENAI_API_KEY" }), text("done")),
  );
  try {
    const wf = workflowFile(`{
      name: "agent-env",
      async run(ctx) {
        await ctx.task("blind", { prompt: "run env", model: "fake-model" });
        await ctx.task("named", { prompt: "print the key", model: "fake-model", env: { OPENAI_API_KEY: true } });
      },
    }`);
    const home = makeTempDir("atomic-secrets-home-");
    const cwd = makeTempDir("atomic-secrets-cwd-");
    const r = await runAtomic(["run", wf, "--json", "--workers", "1"], { home, cwd, env: { ...SECRET_ENV, ATOMIC_OPENAI_BASE_URL: server.url } });
    expect(r.code).toBe(0);
    expect(server.requests).toHaveLength(4);
    // The worker still talks to the provider with the key.
    expect(server.requests[0]!.headers.get("authorization")).toBe(`Bearer ${KEY}`);
    const toolOutput = (i: number) => server.requests[i]!.body.messages.find((m) => m.role === "tool")!.content!;
    expect(toolOutput(1)).toContain("KEEP_ME=visible");
    expect(toolOutput(1)).not.toContain("OPENAI_API_KEY=");
    expect(toolOutput(1)).not.toContain(KEY);
    expect(toolOutput(1)).not.toContain(OTHER_KEY);
    // The stage that asked for the key by name got it in its bash tool...
    expect(toolOutput(3)).toContain(KEY);
    // ...but the transcripts and raw event logs on disk show it redacted.
    const runId = lastJson(r.stdout).runId as string;
    const files = filesUnder(join(home, "artifacts", runId)).filter((f) => /(transcript\.md|events\.jsonl)$/.test(f));
    expect(files.length).toBeGreaterThanOrEqual(2);
    const written = files.map((f) => readFileSync(f, "utf8")).join("\n");
    expect(written).not.toContain(KEY);
    expect(written).toContain("[redacted]");
    const logs = await runAtomic(["logs", runId, "--stage", "named"], { home, env: SECRET_ENV });
    expect(logs.stdout).not.toContain(KEY);
    expect(journalBytes(home)).not.toContain(KEY);
  } finally {
    await server.close();
  }
});

e2eTest("a CLI agent gets the credentials its adapter names (claude: ANTHROPIC_API_KEY), none of the others", async () => {
  const dir = makeTempDir("atomic-secrets-agent-");
  const bin = writeFakeCli(dir, "claude");
  const home = makeTempDir("atomic-secrets-home-");
  writeFileSync(join(home, "config.json"), JSON.stringify({ runners: { claude: { path: bin } } }));
  const wf = workflowFile(`{
    name: "agent-creds",
    async run(ctx) {
      await ctx.task("plain", { prompt: "hi", runner: "claude", model: "m" });
      await ctx.task("asks", { prompt: "hi", runner: "claude", model: "m", env: { PGPASSWORD: true } });
    },
  }`);
  // The stages run in their default sandbox: the fake's log directory (and the fake) are their cwd, the one place they may write.
  const r = await runAtomic(["run", wf, "--workers", "1"], { home, cwd: dir, env: { ...SECRET_ENV, FAKE_AGENT_DIR: dir } });
  expect(r.code).toBe(0);
  const seen = readFileSync(join(dir, "log.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l))
    .filter((x) => x.credentials)
    .map((x) => x.credentials);
  expect(seen).toEqual([["ANTHROPIC_API_KEY"], ["ANTHROPIC_API_KEY", "PGPASSWORD"]]);
});

e2eTest("error messages holding a key are redacted in the journal, in show and in what run prints", async () => {
  const server = await startFakeOpenAI(
    inOrder({ status: 401, body: JSON.stringify({ error: { message: `Incorrect API key provided: ${KEY}.` } }) }),
  );
  try {
    const wf = workflowFile(`{
      name: "leaky",
      async run(ctx) {
        const r = await ctx.task("ask", { prompt: "hi", model: "fake-model", failureMode: "return" });
        await ctx.tool("call", {}, () => { throw new Error("the service refused key " + process.env.OPENAI_API_KEY); }, { retries: 0 });
        return { status: r.status };
      },
    }`);
    const home = makeTempDir("atomic-secrets-home-");
    const r = await runAtomic(["run", wf, "--workers", "1"], { home, env: { ...SECRET_ENV, ATOMIC_OPENAI_BASE_URL: server.url } });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("the service refused key [redacted]");
    expect(r.stdout + r.stderr).not.toContain(KEY);
    expect(journalBytes(home)).not.toContain(KEY);
    const runId = lastJson((await runAtomic(["runs", "--json"], { home })).stdout).id as string;
    // `show` from a shell that does not know the key: the journal itself holds it redacted.
    const show = await runAtomic(["show", runId], { home, env: { OPENAI_API_KEY: undefined } });
    expect(show.code).toBe(0);
    expect(show.stdout).not.toContain(KEY);
    expect(show.stdout).toContain("Incorrect API key provided: [redacted]");
    expect(show.stdout).toContain("the service refused key [redacted]");
    // The workflow's own code throwing: the run's error as printed (text and --json) and recorded.
    const thrower = workflowFile(`{ name: "thrower", async run() { throw new Error("no luck with " + process.env.OPENAI_API_KEY); } }`);
    for (const flags of [[], ["--json"]]) {
      const t = await runAtomic(["run", thrower, "--workers", "1", ...flags], { home, env: SECRET_ENV });
      expect(t.code).toBe(1);
      expect(t.stdout + t.stderr).toContain("no luck with [redacted]");
      expect(t.stdout + t.stderr).not.toContain(KEY);
    }
    expect(journalBytes(home)).not.toContain(KEY);
  } finally {
    await server.close();
  }
});

e2eTest("no process of a run carries its configuration, home, key or token on its command line", async () => {
  const home = join(makeTempDir("atomic-secrets-"), "home-ARGV-MARKER-4242");
  const dir = makeTempDir("atomic-secrets-mark-");
  const started = join(dir, "started");
  // Two stages at once, so the pool runs both its workers (it starts a second only for a stage that waits).
  const wf = workflowFile(`{
    name: "argv",
    async run(ctx) {
      await ctx.parallel([
        { name: "wait", shell: ${JSON.stringify(`touch ${started}; sleep 30`)} },
        { name: "beside", shell: ${JSON.stringify(`touch ${started}-beside; sleep 30`)} },
      ]);
    },
  }`);
  const env = { ...SECRET_ENV, ATOMIC_HOME: undefined, ATOMIC_INTERCOM_IDLE_MS: "1000" };
  const proc = spawnAtomic(["run", wf, "--home", home, "--workers", "2", "--serve", "--port", "0"], { home, env });
  let broker: number | undefined;
  try {
    await waitUntil(() => existsSync(started) && existsSync(`${started}-beside`), 30_000, "both stages to start");
    const token = readFileSync(join(home, "status-token"), "utf8").trim();
    // A message to the stage starts the intercom broker for this home.
    const runId = lastJson((await runAtomic(["runs", "--json", "--home", home], { home, env })).stdout).id as string;
    expect((await runAtomic(["send", runId, "wait", "hello", "--home", home], { home, env })).code).toBe(0);
    broker = (JSON.parse(readFileSync(intercomPaths(home).pidFile, "utf8")) as { pid: number }).pid;
    // The run's processes: the root and its descendants (coordinator, workers, the stage's sh and sleep), and the broker.
    const pids = [...descendantsOf(proc.pid), broker].filter((p, i, all) => all.indexOf(p) === i);
    const lines = [proc.pid, ...pids].map((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " "));
    expect(lines.some((l) => l.includes("--internal-pool-coordinator"))).toBe(true);
    expect(lines.filter((l) => l.includes("--internal-workflow-worker"))).toHaveLength(2);
    expect(lines.filter((l) => l.includes("sleep 30")).length).toBeGreaterThanOrEqual(2);
    expect(lines.filter((l) => l.includes("--internal-intercom-broker"))).toHaveLength(1);
    for (const line of lines.slice(1)) {
      expect(line).not.toContain("ARGV-MARKER");
      expect(line).not.toContain("{");
    }
    for (const line of lines) {
      expect(line).not.toContain(KEY);
      expect(line).not.toContain(token);
    }
  } finally {
    proc.kill("SIGINT");
    await proc.exited;
    if (broker !== undefined) {
      const pid = broker;
      try {
        process.kill(pid, "SIGTERM");
      } catch {
        // already gone
      }
      await waitUntil(() => !existsSync(`/proc/${pid}/cmdline`) || readFileSync(`/proc/${pid}/cmdline`).length === 0, 10_000, "the broker to exit");
    }
  }
});

function descendantsOf(root: number): number[] {
  const r = Bun.spawnSync(["ps", "-eo", "pid=,ppid="], { stdout: "pipe" });
  const children = new Map<number, number[]>();
  for (const line of r.stdout.toString().trim().split("\n")) {
    const [pid, ppid] = line.trim().split(/\s+/).map(Number);
    children.set(ppid!, [...(children.get(ppid!) ?? []), pid!]);
  }
  const out: number[] = [];
  const walk = (pid: number) => {
    for (const c of children.get(pid) ?? []) {
      if (!existsSync(`/proc/${c}/cmdline`) || readFileSync(`/proc/${c}/cmdline`).length === 0) continue;
      out.push(c);
      walk(c);
    }
  };
  walk(root);
  return out;
}

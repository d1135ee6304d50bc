/**
 * Stage sandboxes through the real binary and real bubblewrap
 * (scripts/install-bubblewrap.sh): a shell stage and the openai loop's
 * `bash` tool (scripted by the fake provider) try to read a planted key in
 * a fake ~/.ssh and a file of the atomic home, write outside the cwd
 * (a system directory, another directory, through a symlink), reach a
 * loopback server that is not the provider, and leave a background
 * process behind. Each is refused and the stage's own work succeeds; with
 * `network: "provider"` the provider is reached and the other port is
 * not. The same probe without a sandbox succeeds, so the probe is not
 * vacuous. An agent stage names no sandbox in most tests here: agent
 * stages are sandboxed by default; one of them works in a git worktree,
 * writing and committing there while the rest stays out of reach. A real pi (test/agents) runs whole inside the sandbox:
 * test/runners/sandbox-pi.test.ts.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { atomicBin, runAtomic } from "../helpers/atomic.ts";
import { createOtherUser, otherUsersSupported, removeOtherUsers } from "../helpers/other-user.ts";
import { withoutUserNamespaces } from "../helpers/no-user-namespaces.ts";
import { pidsRunning } from "../helpers/processes.ts";
import { startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { sandboxWorld } from "../helpers/sandbox-world.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, fixture, makeTempDir } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const WORKFLOW = fixture("sandboxed.ts");

async function run(w: ReturnType<typeof sandboxWorld>, inputs: Record<string, string>, env: Record<string, string> = {}, wrap?: string[]) {
  const r = await runAtomic(["run", WORKFLOW, "--json", "--workers", "1", ...Object.entries(inputs).flatMap(([k, v]) => ["--input", `${k}=${v}`])], { home: w.home, cwd: w.cwd, env: { ...w.env, ...env }, ...(wrap ? { wrap } : {}) });
  const last = r.stdout.trim().split("\n").at(-1) ?? "";
  const result = last.startsWith("{") ? JSON.parse(last) : {};
  return { ...r, runId: String(result.runId ?? result.id), outputs: result.outputs, error: result.error as { code: string; message: string; hint?: string } | undefined };
}

function expectContained(out: string, w: ReturnType<typeof sandboxWorld>) {
  expect(out).toContain("SSH=denied");
  expect(out).toContain("ATOMIC_HOME=denied");
  expect(out).toContain("SYSTEM=denied");
  expect(out).toContain("OTHER_PORT=denied");
  expect(out).toContain("WORK=done");
  expect(w.escaped()).toEqual([]);
  expect(w.visits()).toBe(0);
  // The stage has ended: its PID namespace with it, the setsid'd sleep too.
  expect(w.leftovers()).toEqual([]);
  expect(readFileSync(join(w.cwd, "result.txt"), "utf8")).toBe("done\n");
}

e2eTest("a sandboxed shell stage: the key, the atomic home, writes outside the cwd, another port and a background process are refused; its work succeeds", async () => {
  const w = sandboxWorld();
  try {
    const r = await run(w, { shell: w.probe, sandbox: JSON.stringify({ read: ["~/.gitconfig"] }) });
    expect(r.code).toBe(0);
    expect(r.outputs.status).toBe("completed");
    expectContained(r.outputs.text, w);
    // what the stage named is readable
    expect(r.outputs.text).toContain("GITCONFIG=read");
    // a key the stage prints anyway (one in its cwd) is redacted by its look from the result and the logs; so are
    // an sk- key, a bearer token and an api_key= value that no configuration names
    writeFileSync(join(w.cwd, "id_test"), readFileSync(join(w.user, ".ssh", "id_ed25519")));
    const looks = ["sk-proj-abcdefghijklmnopqrstuvwxyz012345", "Bearer abcdefghijklmnopqrstuvwxyz.0123", "api_key=abcd1234efgh5678"];
    const leak = await run(w, { shell: `cat id_test && echo 'key ${looks[0]} end' && echo 'Authorization: ${looks[1]}' && echo 'curl -d ${looks[2]}'`, sandbox: "true" });
    expect(leak.outputs.text).toBe("[redacted]\nkey [redacted] end\nAuthorization: Bearer [redacted]\ncurl -d api_key=[redacted]\n");
    const logs = await runAtomic(["logs", leak.runId, "--stage", "work"], { home: w.home, env: w.env });
    expect(logs.stdout).toBe(leak.outputs.text);
    for (const out of [leak.stdout, logs.stdout]) {
      expect(out).not.toContain("PRIVATE KEY");
      expect(out).not.toContain("abcdefghijklmnopqrstuvwxyz");
      expect(out).not.toContain("abcd1234efgh5678");
    }
  } finally {
    w.close();
  }
});

e2eTest('the same probe with sandbox: "off" reaches everything (the probe is not vacuous); the config\'s sandbox applies to a stage that names none', async () => {
  const w = sandboxWorld();
  try {
    const open = await run(w, { shell: w.probe, sandbox: JSON.stringify("off") });
    expect(open.code).toBe(0);
    for (const seen of ["SSH=read", "ATOMIC_HOME=read", "SYSTEM=written", "OTHER_PORT=reached"]) expect(open.outputs.text).toContain(seen);
    expect(w.escaped().length).toBe(3);
    w.close();
    for (const f of w.escaped()) rmSync(f);
    w.resetVisits();
    // config.json: { "sandbox": true } sandboxes a shell stage without an option of its own
    writeFileSync(join(w.home, "config.json"), JSON.stringify({ sandbox: true }));
    const boxed = await run(w, { shell: w.probe, sandbox: "" });
    expect(boxed.code).toBe(0);
    expect(boxed.outputs.text).toContain("GITCONFIG=hidden");
    expectContained(boxed.outputs.text, w);
  } finally {
    w.close();
  }
});

e2eTest('the openai loop\'s bash tool runs sandboxed by default: with network "provider" it reaches the provider and nothing else', async () => {
  const w = sandboxWorld();
  let providerUrl = "";
  // Through the proxy itself (HTTP_PROXY inside): the provider in absolute form passes, another port is refused
  // with 403 in absolute form and as a CONNECT tunnel.
  const command = () =>
    [
      w.probe,
      `echo PROVIDER=$(curl -s -m 5 -o /dev/null -w '%{http_code}' ${providerUrl}/models)`,
      `echo VIA_PROXY=$(curl -s -m 5 -o /dev/null -w '%{http_code}' --noproxy '' -x "$HTTP_PROXY" ${providerUrl}/models)`,
      `echo PROXY_OTHER=$(curl -s -m 5 -o /dev/null -w '%{http_code}' --noproxy '' -x "$HTTP_PROXY" http://127.0.0.1:${w.otherPort}/)`,
      `curl -s -m 5 -o /dev/null -p --noproxy '' -x "$HTTP_PROXY" http://127.0.0.1:${w.otherPort}/ && echo TUNNEL_OTHER=open || echo TUNNEL_OTHER=refused`,
    ].join("\n");
  const fake = await startFakeOpenAI((req, i) => (i === 0 ? toolCall("bash", { command: command() }) : text("finished")));
  providerUrl = fake.url;
  try {
    // No sandbox option anywhere: an agent stage's default is { network: "provider" }.
    const r = await run(w, { prompt: "probe", sandbox: "" }, { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" });
    expect(r.code).toBe(0);
    expect(r.outputs).toMatchObject({ status: "completed", text: "finished" });
    const tool = String(fake.requests[1]!.body.messages.find((m) => m.role === "tool")!.content);
    expect(tool).toMatch(/exit code 0/);
    expectContained(tool, w);
    // the provider answered through atomic's gate (any HTTP status: the connection was made)
    expect(tool).toMatch(/PROVIDER=[1-5]\d\d/);
    expect(tool).toMatch(/VIA_PROXY=[1-5]\d\d/);
    expect(tool).not.toMatch(/VIA_PROXY=403/);
    expect(tool).toContain("PROXY_OTHER=403");
    expect(tool).toContain("TUNNEL_OTHER=refused");
    expect(w.visits()).toBe(0);
  } finally {
    w.close();
    await fake.close();
  }
});

e2eTest("an agent stage in a worktree, sandboxed by default: it writes and commits in its worktree; the key, the atomic home, the checkout and the rest stay out of reach", async () => {
  const w = sandboxWorld();
  const git = (...args: string[]) => {
    const r = Bun.spawnSync(["git", ...args], { cwd: w.cwd, stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
    return r.stdout.toString();
  };
  // The cwd is a repository (its symlink out committed): the stage works in a worktree of it.
  git("init", "-q", "-b", "main");
  git("add", "-A");
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base");
  const command = [
    w.probe,
    `git add result.txt && git -c user.name=agent -c user.email=agent@example.com commit -q -m "agent work" && echo COMMIT=done`,
    `echo x > "${w.cwd}/in-checkout" 2>/dev/null; echo WHERE=$(pwd)`,
  ].join("\n");
  const fake = await startFakeOpenAI((req, i) => (i === 0 ? toolCall("bash", { command }) : text("finished")));
  try {
    const r = await run(w, { prompt: "work", sandbox: "", worktree: "true" }, { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" });
    expect(r.code).toBe(0);
    expect(r.outputs).toMatchObject({ status: "completed", text: "finished" });
    const tool = String(fake.requests[1]!.body.messages.find((m) => m.role === "tool")!.content);
    for (const seen of ["SSH=denied", "ATOMIC_HOME=denied", "SYSTEM=denied", "OTHER_PORT=denied", "WORK=done", "COMMIT=done"]) expect(tool).toContain(seen);
    expect(w.escaped()).toEqual([]);
    expect(w.visits()).toBe(0);
    expect(w.leftovers()).toEqual([]);
    // it ran in its worktree, and its commit is on its branch: the diff shows its file
    const ws = r.outputs.workspace as { path: string; branch: string; commits: { subject: string }[]; files: { path: string }[] };
    expect(tool).toContain(`WHERE=${ws.path}`);
    expect(ws.commits.map((c) => c.subject)).toEqual(["agent work"]);
    expect(ws.files.map((f) => f.path)).toEqual(["result.txt"]);
    expect(git("show", `${ws.branch}:result.txt`)).toBe("done\n");
    // the checkout is untouched: nothing written there, not through its path either
    expect(existsSync(join(w.cwd, "result.txt"))).toBe(false);
    expect(existsSync(join(w.cwd, "in-checkout"))).toBe(false);
    expect(git("status", "--porcelain")).toBe("");
  } finally {
    w.close();
    await fake.close();
  }
});

// ---------------------------------------------------------------- bad input and a machine without a sandbox

/** A workflow file in a temp dir with `sandbox` as its workflow-wide option. */
function workflowWith(sandbox: unknown): string {
  const file = join(makeTempDir("atomic-sbx-wf-"), "wf.ts");
  writeFileSync(file, `import { workflow } from "atomic";\nexport default workflow({ name: "wide", sandbox: ${JSON.stringify(sandbox)}, async run(ctx) { await ctx.task("s", { shell: "touch ran" }); } });\n`);
  return file;
}

/** A directory whose `bwrap` fails as bwrap does where unprivileged user namespaces are off, for PATH. */
function brokenBwrap(): string {
  const dir = makeTempDir("atomic-sbx-bin-");
  writeFileSync(join(dir, "bwrap"), "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n", { mode: 0o755 });
  return dir;
}

e2eTest('read: ["~/"] shows the home but never its credential paths, write names a writable directory, another run\'s artifacts stay hidden, network "open" reaches another port; network "none" keeps an agent\'s bash from the provider too', async () => {
  const w = sandboxWorld();
  const fake = await startFakeOpenAI((req, i) => (i === 0 ? toolCall("bash", { command: `curl -s -m 5 -o /dev/null ${fake.url}/models && echo PROVIDER=reached || echo PROVIDER=denied\n${w.probe}` }) : text("finished")));
  try {
    // Credentials of every kind in the user's home, a file beside them, a directory to write, and another run's artifacts.
    const planted = { ".aws/credentials": "aws_secret", ".config/gcloud/credentials.db": "gcloud_secret", ".netrc": "netrc_secret", ".codex/auth.json": "codex_secret", ".config/tool.conf": "visible" };
    for (const [path, body] of Object.entries(planted)) {
      mkdirSync(join(w.user, path, ".."), { recursive: true });
      writeFileSync(join(w.user, path), `${body}\n`);
    }
    const shared = makeTempDir("atomic-sbx-shared-");
    const artifacts = makeTempDir("atomic-sbx-artifacts-");
    mkdirSync(join(artifacts, "01-another-run"));
    writeFileSync(join(artifacts, "01-another-run", "output.txt"), "another run's output\n");
    writeFileSync(join(w.home, "config.json"), JSON.stringify({ artifacts: { dir: artifacts } }));
    const probe = [
      w.probe,
      ...Object.keys(planted).map((path) => `cat "$HOME/${path}" 2>/dev/null || echo "${path}=hidden"`),
      `echo x > "$HOME/new-file" 2>/dev/null && echo HOME_WRITE=written || echo HOME_WRITE=denied`,
      `echo x > "${shared}/note" && echo SHARED_WRITE=written`,
      `cat "${artifacts}/01-another-run/output.txt" 2>/dev/null || echo ARTIFACTS=hidden`,
    ].join("\n");
    const open = await run(w, { shell: probe, sandbox: JSON.stringify({ network: "open", read: ["~/"], write: [shared] }) });
    expect(open.code).toBe(0);
    const out = open.outputs.text as string;
    expect(out).toContain("SSH=denied");
    expect(out).toContain("GITCONFIG=read");
    expect(out).toContain("visible\n");
    for (const path of [".aws/credentials", ".config/gcloud/credentials.db", ".netrc", ".codex/auth.json"]) expect(out).toContain(`${path}=hidden`);
    expect(out).not.toContain("_secret");
    expect(out).toContain("HOME_WRITE=denied");
    expect(out).toContain("SHARED_WRITE=written");
    expect(readFileSync(join(shared, "note"), "utf8")).toBe("x\n");
    expect(out).toContain("ARTIFACTS=hidden");
    expect(out).toContain("ATOMIC_HOME=denied");
    expect(out).toContain("OTHER_PORT=reached");
    expect(out).toContain("WORK=done");
    expect(w.escaped()).toEqual([]);
    expect(w.leftovers()).toEqual([]);
    expect(existsSync(join(w.user, "new-file"))).toBe(false);
    w.resetVisits();
    // network "none" on an agent stage: the runner talks to the provider, its bash tool reaches neither it nor another port.
    const none = await run(w, { prompt: "probe", sandbox: JSON.stringify({ network: "none" }) }, { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" });
    expect(none.code).toBe(0);
    expect(none.outputs).toMatchObject({ status: "completed", text: "finished" });
    const tool = String(fake.requests[1]!.body.messages.find((m) => m.role === "tool")!.content);
    expect(tool).toContain("PROVIDER=denied");
    expectContained(tool, w);
    expect(fake.requests).toHaveLength(2);
  } finally {
    w.close();
    await fake.close();
  }
});

const NO_BWRAP_PATH = "/nonexistent-bin";

e2eTest("a provider host that does not resolve: the stage is told so in one sentence and a hint (the proxy's answer and its stderr); nothing is left behind", async () => {
  const w = sandboxWorld();
  try {
    // .invalid never resolves (RFC 2606); HTTPS asks the proxy for a tunnel, HTTP sends it the request.
    const host = "no-such-host.invalid";
    const shell = [`curl -sS -m 20 https://${host}/ 2>&1 | tail -1`, `curl -s -m 20 -o body.txt http://${host}/`, "exit 3"].join("; ");
    const r = await run(w, { shell, sandbox: JSON.stringify({ network: "provider", hosts: [`${host}:443`, `${host}:80`] }) });
    expect(r.outputs.status).toBe("failed");
    const sentence = `atomic sandbox: the provider host ${host} cannot be resolved on this machine (getaddrinfo `;
    const hint = "; hint: check the provider's base URL (or the stage's sandbox hosts) and this machine's DNS";
    // curl shows the tunnel's 502; the plain request gets the sentence as its body
    expect(r.outputs.text).toMatch(/CONNECT tunnel failed, response 502/);
    const body = readFileSync(join(w.cwd, "body.txt"), "utf8");
    expect(body).toContain(sentence);
    expect(body).toContain(hint);
    // on the stage's stderr once per host, where its failure and atomic logs find it
    const logs = await runAtomic(["logs", r.runId, "--stage", "work"], { home: w.home, cwd: w.cwd, env: w.env });
    expect(logs.stdout.split(sentence).length - 1).toBe(1);
    expect(w.leftovers()).toEqual([]);
  } finally {
    w.close();
  }
}, 90_000);

e2eTest("bad sandbox options of a workflow: one sentence and a hint, exit 2, no run and nothing started", async () => {
  const w = sandboxWorld();
  try {
    const cases: [unknown, RegExp, Record<string, string>][] = [
      [{ network: "everywhere" }, /workflow wide: sandbox network "everywhere" is not one of none, provider, open/, {}],
      [{ read: [".gitconfig"] }, /sandbox read path "\.gitconfig" is relative/, {}],
      [{ read: ["~/missing-file"] }, /sandbox read path ~\/missing-file does not exist/, {}],
      [{ read: ["~/.ssh"] }, /holds credentials/, {}],
      [true, /workflow wide asks for a sandbox, but bubblewrap \(bwrap\) is not installed/, { PATH: `${NO_BWRAP_PATH}:/usr/bin/env-free` }],
      [true, /bubblewrap cannot create a sandbox here \(setting up uid map: Permission denied\)/, { PATH: `${brokenBwrap()}:${process.env.PATH}` }],
    ];
    for (const [sandbox, message, env] of cases) {
      const r = await runAtomic(["run", workflowWith(sandbox)], { home: w.home, cwd: w.cwd, env: { ...w.env, ...env } });
      expect(r.code).toBe(2);
      const lines = r.stderr.trim().split("\n");
      expect(lines[0]).toMatch(/^error: /);
      expect(lines[0]).toMatch(message);
      expect(lines[1]).toMatch(/^hint: /);
      expect(lines.length).toBe(2);
      expect(existsSync(join(w.cwd, "ran"))).toBe(false);
    }
    expect((await runAtomic(["runs", "--json"], { home: w.home })).stdout.trim()).toBe("");
  } finally {
    w.close();
  }
});

e2eTest("a stage that asks for a sandbox where bwrap is missing or broken fails before it starts; sandbox: \"off\" runs there", async () => {
  const w = sandboxWorld();
  try {
    const bin = makeTempDir("atomic-sbx-path-");
    // PATH without bwrap, but with sh and touch for the stage
    for (const tool of ["sh", "touch"]) symlinkSync(Bun.which(tool)!, join(bin, tool));
    const missing = await run(w, { shell: "touch ran", sandbox: "true" }, { PATH: bin });
    expect(missing.code).toBe(1);
    expect(missing.error).toMatchObject({ code: "bad_sandbox", message: 'stage "work": bubblewrap (bwrap) is not installed on this machine (nor on PATH), so the stage cannot be sandboxed' });
    expect(missing.error!.hint).toMatch(/^install bubblewrap \(Debian, Ubuntu: sudo apt-get install bubblewrap/);
    const broken = await run(w, { shell: "touch ran", sandbox: "true" }, { PATH: `${brokenBwrap()}:${bin}` });
    expect(broken.code).toBe(1);
    expect(broken.error!.message).toMatch(/bubblewrap cannot create a sandbox here \(setting up uid map: Permission denied\)/);
    expect(broken.error!.hint).toMatch(/^enable unprivileged user namespaces/);
    const bad = await run(w, { shell: "touch ran", sandbox: JSON.stringify({ network: "lan" }) });
    expect(bad.code).toBe(1);
    expect(bad.error).toMatchObject({ code: "bad_sandbox", message: 'stage "work": sandbox network "lan" is not one of none, provider, open' });
    expect(existsSync(join(w.cwd, "ran"))).toBe(false);
    const off = await run(w, { shell: "touch ran", sandbox: JSON.stringify("off") }, { PATH: bin });
    expect(off.code).toBe(0);
    expect(existsSync(join(w.cwd, "ran"))).toBe(true);
    // An agent stage that names no sandbox gets the default one: there it fails too, saying so and how to turn it
    // off; the provider is never asked. sandbox: "off" in the config runs it (unsandboxed, as asked).
    const fake = await startFakeOpenAI(() => text("fine"));
    try {
      const agentEnv = { PATH: bin, ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" };
      const byDefault = await run(w, { prompt: "hi", sandbox: "" }, agentEnv);
      expect(byDefault.code).toBe(1);
      expect(byDefault.error).toMatchObject({ code: "bad_sandbox", message: 'stage "work": agent stages run in a sandbox by default, but bubblewrap (bwrap) is not installed on this machine (nor on PATH)' });
      expect(byDefault.error!.hint).toMatch(/^install bubblewrap \(Debian, Ubuntu: sudo apt-get install bubblewrap.*\), or set sandbox: "off" \(on the stage, its workflow or in the config file\) to run agent stages unsandboxed$/);
      const brokenDefault = await run(w, { prompt: "hi", sandbox: "" }, { ...agentEnv, PATH: `${brokenBwrap()}:${bin}` });
      expect(brokenDefault.error!.message).toBe('stage "work": agent stages run in a sandbox by default, but bubblewrap cannot create a sandbox here (setting up uid map: Permission denied)');
      expect(brokenDefault.error!.hint).toMatch(/^enable unprivileged user namespaces .*, or set sandbox: "off" \(on the stage, its workflow or in the config file\) to run agent stages unsandboxed$/);
      expect(fake.requests.length).toBe(0);
      writeFileSync(join(w.home, "config.json"), JSON.stringify({ sandbox: "off" }));
      const optedOut = await run(w, { prompt: "hi", sandbox: "" }, agentEnv);
      expect(optedOut.code).toBe(0);
      expect(optedOut.outputs).toMatchObject({ status: "completed", text: "fine" });
      expect(fake.requests.length).toBe(1);
    } finally {
      await fake.close();
    }
  } finally {
    w.close();
  }
});

e2eTest("atomic doctor says whether the sandbox works here", async () => {
  const home = makeTempDir("atomic-sbx-doctor-");
  const works = await runAtomic(["doctor", "--json"], { home });
  expect(JSON.parse(works.stdout).sandbox).toMatchObject({ usable: true, bwrap: expect.stringMatching(/bwrap$/), version: expect.stringMatching(/^bubblewrap /) });
  const said = (await runAtomic(["doctor"], { home })).stdout;
  expect(said).toMatch(/^sandbox +works here .*config default: default\)$/m);
  expect(said).toContain("agent stages run sandboxed (network: provider) unless they or their workflow say otherwise; shell stages run unsandboxed");
  // without bubblewrap the agent stages' default cannot be had: exit code 1, and how to turn it off
  // (a key set: the default runner is usable, so the exit code is the sandbox's to decide)
  const missing = await runAtomic(["doctor"], { home, env: { PATH: NO_BWRAP_PATH, OPENAI_API_KEY: "sk-test" } });
  expect(missing.stdout).toMatch(/^sandbox +\(bubblewrap \(bwrap\) is not installed/m);
  expect(missing.stdout).toMatch(/hint: install bubblewrap/);
  expect(missing.stdout).toContain('agent stages that name no sandbox fail here (they are sandboxed by default); set sandbox: "off" in the config to run them unsandboxed');
  expect(missing.code).toBe(1);
  writeFileSync(join(home, "config.json"), JSON.stringify({ sandbox: "off" }));
  const off = await runAtomic(["doctor"], { home, env: { PATH: NO_BWRAP_PATH, OPENAI_API_KEY: "sk-test" } });
  expect(off.stdout).toMatch(/^sandbox +\(bubblewrap/m);
  expect(off.stdout).toContain("stages run unsandboxed unless they or their workflow ask for a sandbox");
  expect(off.code).toBe(0);
  // a config that asks for a sandbox that cannot be had here: exit code 1 and what it means for the stages
  writeFileSync(join(home, "config.json"), JSON.stringify({ sandbox: true }));
  const asked = await runAtomic(["doctor"], { home, env: { PATH: NO_BWRAP_PATH } });
  expect(asked.stdout).toContain("every stage that names no sandbox of its own fails here: the config asks for one");
  expect(asked.code).toBe(1);
  const broken = await runAtomic(["doctor", "--json"], { home, env: { PATH: `${brokenBwrap()}:${process.env.PATH}` } });
  expect(JSON.parse(broken.stdout).sandbox).toMatchObject({ usable: false, problem: expect.stringMatching(/setting up uid map/), hint: expect.stringMatching(/user namespaces/) });
});

e2eTest("where user namespaces are off for real (their limit reached for atomic's processes, test/helpers/no-user-namespaces.ts): the real bwrap fails, a stage that asks for a sandbox fails with the sentence and the hint, as does an agent stage's default; sandbox: \"off\" runs; doctor says so", async () => {
  const wrap = withoutUserNamespaces();
  // A machine that lets no process make a user namespace has them off already: the fake bwrap above stands for it.
  if (!wrap) return;
  const w = sandboxWorld();
  try {
    const sentence = "bubblewrap cannot create a sandbox here (Creating new namespace failed: nesting depth or /proc/sys/user/max_*_namespaces exceeded (ENOSPC))";
    const asked = await run(w, { shell: "touch ran", sandbox: "true" }, {}, wrap);
    expect(asked.code).toBe(1);
    expect(asked.error).toMatchObject({ code: "bad_sandbox", message: `stage "work": ${sentence}, so the stage cannot be sandboxed` });
    expect(asked.error!.hint).toBe('raise the limit of user namespaces (sudo sysctl user.max_user_namespaces=15000; 0 turns them off), or set sandbox: "off" on the stage');
    expect(existsSync(join(w.cwd, "ran"))).toBe(false);
    const fake = await startFakeOpenAI(() => text("fine"));
    try {
      const byDefault = await run(w, { prompt: "hi", sandbox: "" }, { ATOMIC_OPENAI_BASE_URL: fake.url, OPENAI_API_KEY: "sk-test" }, wrap);
      expect(byDefault.error).toMatchObject({ code: "bad_sandbox", message: `stage "work": agent stages run in a sandbox by default, but ${sentence}` });
      expect(byDefault.error!.hint).toMatch(/^raise the limit of user namespaces .*, or set sandbox: "off" \(on the stage, its workflow or in the config file\) to run agent stages unsandboxed$/);
      expect(fake.requests.length).toBe(0);
    } finally {
      await fake.close();
    }
    const off = await run(w, { shell: "touch ran", sandbox: JSON.stringify("off") }, {}, wrap);
    expect(off.code).toBe(0);
    expect(existsSync(join(w.cwd, "ran"))).toBe(true);
    const doctor = await runAtomic(["doctor", "--json"], { home: w.home, env: { ...w.env, OPENAI_API_KEY: "sk-test" }, wrap });
    expect(JSON.parse(doctor.stdout).sandbox).toMatchObject({ usable: false, problem: `${sentence}, so the stage cannot be sandboxed`, hint: expect.stringMatching(/^raise the limit of user namespaces/) });
    expect(doctor.code).toBe(1);
    // outside that process tree the machine is as it was: the same doctor finds the sandbox working
    expect(JSON.parse((await runAtomic(["doctor", "--json"], { home: w.home, env: w.env })).stdout).sandbox.usable).toBe(true);
  } finally {
    w.close();
  }
});

e2eTest("as a normal user (unprivileged user namespaces): the sandbox works the same", async () => {
  if (!otherUsersSupported()) return;
  const other = await createOtherUser();
  try {
    const theirs = makeTempDir("atomic-sbx-user-");
    mkdirSync(join(theirs, ".ssh"));
    writeFileSync(join(theirs, ".ssh", "id_ed25519"), "their key\n");
    mkdirSync(join(theirs, "work"));
    // The binary and the workflow where that user can read them (the checkout may sit in a folder only we can enter).
    const bin = join(theirs, "atomic");
    copyFileSync(atomicBin(), bin);
    chmodSync(bin, 0o755);
    copyFileSync(WORKFLOW, join(theirs, "sandboxed.ts"));
    for (const p of [theirs, join(theirs, ".ssh"), join(theirs, ".ssh", "id_ed25519"), join(theirs, "work"), join(theirs, "sandboxed.ts")]) chownSync(p, other.uid, other.uid);
    const marker = String(8_000_000 + Math.floor(Math.random() * 1_000_000));
    const escape = `/var/tmp/atomic-sandbox-user-${marker}`;
    const probe = [
      `cat ~/.ssh/id_ed25519 >/dev/null 2>&1 && echo SSH=read || echo SSH=denied`,
      `echo x > ${escape} 2>/dev/null && echo SYSTEM=written || echo SYSTEM=denied`,
      `setsid sleep ${marker} >/dev/null 2>&1 < /dev/null &`,
      `echo done > result.txt && echo WORK=done`,
    ].join("\n");
    const env = ["env", `HOME=${theirs}`, `ATOMIC_HOME=${join(theirs, "home")}`, `TMPDIR=${theirs}`, "NO_COLOR=1", `PATH=${process.env.PATH}`];
    const cmd = [...env, "sh", "-c", `cd "$HOME/work" && exec "$@"`, "sh", bin, "run", join(theirs, "sandboxed.ts"), "--json", "--workers", "1", "--input", `shell=${probe}`, "--input", "sandbox=true"];
    const r = await other.run(cmd, { timeoutMs: 60_000 });
    expect(r.code).toBe(0);
    const outputs = JSON.parse(r.stdout.trim().split("\n").at(-1)!).outputs;
    expect(outputs.status).toBe("completed");
    for (const seen of ["SSH=denied", "SYSTEM=denied", "WORK=done"]) expect(outputs.text).toContain(seen);
    expect(existsSync(escape)).toBe(false);
    expect(pidsRunning(["sleep", marker])).toEqual([]);
    expect(statSync(join(theirs, "work", "result.txt")).uid).toBe(other.uid);
  } finally {
    await removeOtherUsers();
  }
});

e2eTest("a working bwrap is tried once, not by every run: the next run's root and worker remember it; a changed bwrap is tried again and its failure is the sentence", async () => {
  const w = sandboxWorld();
  try {
    // A bwrap on PATH that notes each call (the check runs /bin/true, a stage its command) and runs the real one.
    const dir = makeTempDir("atomic-sbx-bin-");
    const log = join(dir, "calls.log");
    const wrapper = join(dir, "bwrap");
    writeFileSync(wrapper, `#!/bin/sh\nfor a; do last="$a"; done\necho "$last" >> ${log}\nexec ${Bun.which("bwrap")} "$@"\n`, { mode: 0o755 });
    const env = { PATH: `${dir}:${process.env.PATH}` };
    const calls = () => (existsSync(log) ? readFileSync(log, "utf8").trim().split("\n") : []);
    const first = await run(w, { shell: "touch ran", sandbox: "true" }, env);
    expect(first.code).toBe(0);
    expect(calls()).toEqual(["/bin/true", "touch ran"]);
    const second = await run(w, { shell: "touch ran", sandbox: "true" }, env);
    expect(second.code).toBe(0);
    expect(calls()).toEqual(["/bin/true", "touch ran", "touch ran"]);
    // The same path, another bwrap (one that fails as where user namespaces are off): tried again, and refused.
    rmSync(wrapper);
    writeFileSync(wrapper, `#!/bin/sh\necho broken >> ${log}\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n`, { mode: 0o755 });
    const broken = await run(w, { shell: "touch broken", sandbox: "true" }, env);
    expect(broken.code).toBe(1);
    expect(broken.error!.message).toMatch(/bubblewrap cannot create a sandbox here \(setting up uid map: Permission denied\)/);
    expect(calls().at(-1)).toBe("broken");
    expect(existsSync(join(w.cwd, "broken"))).toBe(false);
  } finally {
    w.close();
  }
});

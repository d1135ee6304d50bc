/**
 * Signing in to the status server through the real binary: `atomic serve`
 * prints a login URL; opening it sets the session cookie and redirects to
 * the clean address; the cookie then opens the page and the API; `--open`
 * hands the browser a 0600 redirect file, never the token on a command
 * line. And a second Unix user on the same machine (made with useradd,
 * deleted with userdel -r) reads nothing: not the token file, not the
 * journal, not one API route, not the page's data.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { chmodSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { lineWatcher, runAtomic, spawnAtomic, waitUntil } from "../helpers/atomic.ts";
import { createOtherUser, otherUsersSupported, removeOtherUsers } from "../helpers/other-user.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, makeTempDir } from "../e2e/support.ts";

// Tests of this file run concurrently: users go in afterAll, when none runs (it runs also when a test failed).
afterEach(cleanupWhenIdle);
afterAll(async () => {
  await removeOtherUsers();
  await cleanupNow();
});

const PIPELINE = join(import.meta.dir, "fixtures", "pipeline.ts");

async function serveWithRun(home: string, env: Record<string, string> = {}, extra: string[] = []) {
  const done = await runAtomic(["run", PIPELINE, "--input", "pause=0"], { home });
  expect(done.code).toBe(0);
  const runId = /started run ([0-9a-z]{18})/.exec(done.stdout)![1]!;
  const proc = spawnAtomic(["serve", "--port", "0", ...extra], { home, env });
  const out = lineWatcher(proc.stdout);
  const login = (await out.waitFor(/^status page: /)).slice("status page: ".length).trim();
  const m = /^(http:\/\/127\.0\.0\.1:(\d+)\/)\?token=([0-9a-f]{64})$/.exec(login);
  expect(m).not.toBeNull();
  return { proc, out, runId, login, url: m![1]!, port: Number(m![2]), token: m![3]! };
}

e2eTest("the login URL atomic serve prints sets an HttpOnly SameSite=Strict cookie, redirects to a clean URL, and opens page and API", async () => {
  const home = makeTempDir();
  const { proc, runId, login, url, port, token } = await serveWithRun(home);
  // without the cookie: a sign-in page and 401s
  const before = await fetch(url);
  expect(before.status).toBe(401);
  expect(await before.text()).toContain("login URL");
  expect((await fetch(`${url}api/runs`)).status).toBe(401);

  const signedIn = await fetch(login, { redirect: "manual" });
  expect(signedIn.status).toBe(303);
  expect(signedIn.headers.get("location")).toBe("/");
  const set = signedIn.headers.get("set-cookie")!;
  expect(set).toContain(`atomic_session_${port}=`);
  expect(set).toContain("HttpOnly");
  expect(set).toContain("SameSite=Strict");
  expect(set).not.toContain(token);
  const cookie = set.split(";")[0]!;

  const page = await fetch(url, { headers: { cookie } });
  expect(page.status).toBe(200);
  const html = await page.text();
  expect(html).toContain("<title>atomic</title>");
  expect(html).not.toContain(token);
  const runs = (await (await fetch(`${url}api/runs`, { headers: { cookie } })).json()) as { runs: { id: string }[] };
  expect(runs.runs.map((r) => r.id)).toEqual([runId]);
  // a change needs the page's own Origin
  const control = (origin: string) =>
    fetch(`${url}api/runs/${runId}/control`, { method: "POST", headers: { cookie, origin, "content-type": "application/json" }, body: '{"action":"pause"}' });
  expect((await control(url.slice(0, -1))).status).toBe(409); // accepted; the run has ended
  expect((await control("http://evil.example")).status).toBe(403);
  // the token file: 0600 in a 0700 home
  expect(statSync(join(home, "status-token")).mode & 0o777).toBe(0o600);
  expect(statSync(home).mode & 0o777).toBe(0o700);
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(0);
});

e2eTest("--open hands the browser a 0600 redirect file, not the token on its command line; --json names the login URL", async () => {
  const home = makeTempDir();
  const bin = makeTempDir();
  const argvFile = join(bin, "argv");
  writeFileSync(join(bin, "xdg-open"), `#!/bin/sh\nprintf '%s\\n' "$@" > '${argvFile}'\n`);
  chmodSync(join(bin, "xdg-open"), 0o755);
  const { proc, token, login } = await serveWithRun(home, { PATH: `${bin}:${process.env.PATH}` }, ["--open"]);
  await waitUntil(() => {
    try {
      return readFileSync(argvFile, "utf8").length > 0;
    } catch {
      return false;
    }
  }, 20_000, "xdg-open to be called");
  const argv = readFileSync(argvFile, "utf8").trim();
  expect(argv).not.toContain(token);
  expect(argv).toMatch(/^file:\/\//);
  const file = argv.slice("file://".length);
  expect(statSync(file).mode & 0o777).toBe(0o600);
  expect(readFileSync(file, "utf8")).toContain(`url=${login.replace("&", "&#38;")}`);
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(0);

  const json = spawnAtomic(["serve", "--port", "0", "--json"], { home });
  const first = JSON.parse(await lineWatcher(json.stdout).waitFor(/^\{/)) as { type: string; url: string; loginUrl: string };
  expect(first.type).toBe("serving");
  expect(first.loginUrl).toBe(`${first.url}?token=${token}`);
  json.kill("SIGINT");
  expect(await json.exited).toBe(0);
});

e2eTest("another Unix user on the machine reads nothing: not the token file, the journal, any route, or the page's data", async () => {
  if (!otherUsersSupported()) return;
  // The home is made by atomic itself, in a directory every user may pass through.
  const parent = makeTempDir();
  chmodSync(parent, 0o755);
  const home = join(parent, "home");
  const { proc, runId, url, token } = await serveWithRun(home);
  const other = await createOtherUser();

  // the files: atomic made the home 0700 and the token 0600
  expect(statSync(home).mode & 0o777).toBe(0o700);
  expect(statSync(join(home, "status-token")).mode & 0o777).toBe(0o600);
  for (const file of ["status-token", "atomic.db"]) {
    const r = await other.run(["cat", join(home, file)]);
    expect(r.code, file).not.toBe(0);
    expect(r.stdout).toBe("");
  }
  expect((await other.run(["ls", home])).code).not.toBe(0);
  // even in a home someone opened for passing through, the token file is the owner's alone
  chmodSync(home, 0o711);
  const opened = await other.run(["cat", join(home, "status-token")]);
  expect(opened.code).not.toBe(0);
  expect(opened.stdout).toBe("");
  chmodSync(home, 0o700);
  // the server's command line (world-readable) holds no token
  expect(readFileSync(`/proc/${proc.pid}/cmdline`, "utf8")).not.toContain(token);
  const cmdline = await other.run(["cat", `/proc/${proc.pid}/cmdline`]);
  expect(cmdline.stdout).not.toContain(token);
  expect((await other.run(["cat", `/proc/${proc.pid}/environ`])).code).not.toBe(0);

  // every route but /healthz, as that user, with nothing or with guesses
  const routes = ["/", `/runs/${runId}`, "/api/runs", `/api/runs/${runId}`, `/api/runs/${runId}/events`, `/api/runs/${runId}/stages/test/transcript`, "/metrics", "/assets/app.js"];
  const curl = (path: string, ...args: string[]) => other.run(["curl", "-s", "-m", "10", "-w", "\n%{http_code}", ...args, `${url.slice(0, -1)}${path}`]);
  // the 32 requests at once (each its own runuser and curl; none depends on another)
  const guesses = [[], ["-H", "authorization: Bearer 0000"], ["-H", "cookie: atomic_session_1=x"], ["-G", "-d", "token=guess"]];
  const tries = routes.flatMap((path) => guesses.map((args) => ({ path, args })));
  const answers = await Promise.all(tries.map(({ path, args }) => curl(path, ...args)));
  tries.forEach(({ path, args }, i) => {
    const r = answers[i]!;
    const code = Number(r.stdout.trim().split("\n").at(-1));
    expect([401, 403], `${path} ${args.join(" ")}: ${code} ${r.code} ${r.stderr}`).toContain(code);
    expect(r.stdout).not.toContain("12 tests passed");
    expect(r.stdout).not.toContain('"workflow"');
    expect(r.stdout).not.toContain("atomic_runs");
  });
  const post = await curl(`/api/runs/${runId}/control`, "-X", "POST", "-H", "content-type: application/json", "-d", '{"action":"cancel"}');
  expect(post.stdout.trim().split("\n").at(-1)).toBe("401");
  const stream = await curl(`/api/runs/${runId}/stream`);
  expect(stream.stdout.trim().split("\n").at(-1)).toBe("401");
  // the sign-in page tells the user what to do and carries no data
  const page = await curl("/");
  expect(page.stdout).toContain("atomic serve");
  expect(page.stdout).not.toContain(runId);
  expect((await curl("/healthz")).stdout).toContain('"ok":true');
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(0);
}, 120_000);

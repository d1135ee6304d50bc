/**
 * The console's review of a stage's diff (issue 30), in headless Chromium
 * against the real binary (`atomic serve`, and `atomic run` of
 * fixtures/review.ts on a real git repository, its agent stage on the
 * fake OpenAI provider):
 *
 * - the review question links to the diff view: the files changed, the
 *   diff with line numbers and the code coloured (highlight.js's classes);
 * - bad input is one sentence: "Request changes" with no comment, an empty
 *   comment on a line, a comment (through the API) on a line the diff does
 *   not show;
 * - a comment on a line and "Request changes": the stage gets a follow-up
 *   turn of its session with the comment, the new diff is up for review;
 * - "Approve": the workflow goes on and completes.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { startFakeOpenAI, text, toolCall } from "../helpers/fake-openai.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { ARTIFACTS, HAVE_CHROMIUM, releaseBrowser, closePageAndServer, launchBrowser, newPage, signIn, startRun, startServe } from "./browser-support.ts";

declare const document: {
  body: { dataset: Record<string, string | undefined> };
  querySelector(selector: string): { textContent: string | null } | null;
};

beforeAll(launchBrowser);
afterAll(releaseBrowser);
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

function git(cwd: string, ...args: string[]): string {
  const r = Bun.spawnSync(["git", ...args], { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, LC_ALL: "C" } });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

const FIRST = "export const answer = 41;\nconst unused = 1;\n";
const REVISED = "export const answer = 42;\n";

describe.skipIf(!HAVE_CHROMIUM)("the review of a stage's diff in Chromium", () => {
  test("comment on a line, request changes: the stage's follow-up turn gets the comment; approve: the workflow goes on; bad input is one sentence", async () => {
    // the agent writes app.ts; asked for changes (a follow-up turn of its session), it writes it again
    const provider = await startFakeOpenAI((req) => {
      const last = req.body.messages.at(-1)!;
      if (last.role === "tool") return text("done");
      return toolCall("write", { path: "app.ts", content: String(last.content).includes("asks for changes") ? REVISED : FIRST });
    });
    const home = makeTempDir();
    const repo = makeTempDir("atomic-review-repo-");
    git(repo, "init", "-q", "-b", "main");
    writeFileSync(join(repo, "README.md"), "# app\n");
    git(repo, "add", "-A");
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base");
    const { proc: server, url, login } = await startServe(home);
    const run = await startRun(home, "review.ts", [], { cwd: repo, env: { ATOMIC_OPENAI_BASE_URL: provider.url, OPENAI_API_KEY: "sk-test" } });
    const { page, errors } = await newPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      // the review question, with a way to the diff
      await page.locator("button.review-open").click({ timeout: 60_000 });
      await page.waitForSelector("#diff-view tr.line", { timeout: 15_000 });
      expect(new URL(page.url()).searchParams.get("diff")).toBe("edit");
      expect(await page.locator("#diff-files li a").allTextContents()).toEqual(["app.ts"]);
      expect(await page.textContent("#review-state")).toBe("The run waits for your review of this diff.");
      const lines = await page.$$eval("#diff-view tr.line", (rows) => rows.map((r) => `${r.getAttribute("data-new")} ${r.querySelector("td.code")!.textContent}`));
      expect(lines).toEqual(["1 export const answer = 41;", "2 const unused = 1;"]);
      // the code is coloured: highlight.js's keyword class on `const`
      expect(await page.locator('#diff-view tr.line[data-new="2"] td.code span.hljs-keyword').first().textContent()).toBe("const");
      await page.screenshot({ path: join(ARTIFACTS, "review-diff.png"), fullPage: true });

      // bad input: changes requested without a comment, an empty comment, a line the diff does not show
      await page.click("#review-request");
      await page.waitForFunction(() => document.querySelector("#review-problem")?.textContent?.startsWith("a request for changes needs at least one comment"), undefined, { timeout: 15_000 });
      await page.click('#diff-view tr.line[data-new="2"] button.add-comment');
      await page.click("#diff-view tr.comment-row button.comment-add");
      expect(await page.textContent("#diff-view .comment-problem")).toBe("the comment on app.ts:2 is empty: write what should change there");
      const unknown = await page.evaluate(async (runId) => {
        const r = await fetch(`/api/runs/${runId}/stages/edit/review`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ comments: [{ file: "app.ts", line: 9, text: "here" }] }) });
        return { status: r.status, body: (await r.json()) as { error: { message: string; hint: string } } };
      }, run.id);
      expect(unknown.status).toBe(400);
      expect(unknown.body.error.message).toBe("line 9 of app.ts is not a line the diff of stage edit shows");
      expect(unknown.body.error.hint).toContain(`atomic diff ${run.id} edit`);

      // a comment on line 2, changes requested: the follow-up turn gets it
      await page.fill("#diff-view tr.comment-row textarea", "drop the unused constant");
      await page.click("#diff-view tr.comment-row button.comment-add");
      expect(await page.textContent("#diff-view tr.draft-row .draft-text")).toBe("drop the unused constant");
      expect(await page.textContent("#review-request")).toBe("Request changes (1 comment)");
      await page.click("#review-request");
      const followUp = await provider.requestMatching((q) => JSON.stringify(q.body.messages.at(-1)).includes("asks for changes"));
      const asked = String(followUp.body.messages.at(-1)!.content);
      expect(asked).toContain("- app.ts:2: drop the unused constant");
      // the same session: the first turn's messages come before it
      expect(JSON.stringify(followUp.body.messages)).toContain("edit the app");
      // the revised diff is up for review
      await page.waitForFunction(() => document.querySelector('#diff-view tr.line[data-new="1"] td.code')?.textContent === "export const answer = 42;", undefined, { timeout: 60_000 });
      await page.waitForFunction(() => document.querySelector("#review-state")?.textContent === "The run waits for your review of this diff.", undefined, { timeout: 30_000 });
      expect(await page.$$eval("#diff-view tr.line", (rows) => rows.length)).toBe(1);

      // approve: the workflow goes on
      await page.click("#review-approve");
      await page.waitForFunction(() => document.body.dataset.runStatus === "completed", undefined, { timeout: 60_000 });
      expect(await run.proc.exited).toBe(0);
      const shown = JSON.parse((await runAtomic(["show", run.id, "--json"], { home })).stdout) as { run: { outputs: Record<string, unknown> } };
      const branch = git(repo, "branch", "--list", "--format=%(refname:short)", "atomic/*").trim();
      expect(shown.run.outputs).toEqual({ approved: true, by: "status-page", reviewed: "edit-revise-1", head: git(repo, "rev-parse", branch).trim(), after: "went on" });
      // one branch: the follow-up worked on the stage's own; it holds the revised file; the checkout is untouched
      expect(git(repo, "show", `${branch}:app.ts`)).toBe(REVISED);
      expect(git(repo, "status", "--porcelain")).toBe("");
      // the browser logs the two refusals asked for above (no comment, a line not shown), and nothing else
      expect(errors).toEqual(Array(2).fill("Failed to load resource: the server responded with a status of 400 (Bad Request)"));
    } finally {
      await closePageAndServer(page, server);
      await provider.close();
    }
  }, 180_000);
});

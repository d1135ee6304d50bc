/**
 * The status page does what the API does (issue 13, item 19), in headless
 * Chromium against the real binary (`atomic serve` and `atomic run` of
 * fixtures/interact.ts):
 *
 * - answering from the page (a choice button, then the text box of a
 *   question without choices) lets a run waiting on ctx.ask go on;
 * - a message sent from the page's form reaches a running shell stage on
 *   its stdin, with the files chosen in the form attached (copied into the
 *   run's artifacts, in the message as `atomic send --attach` puts them);
 *   a file over the attachment cap and a stage name the workflow cannot
 *   reach (with its close match) are refused in one sentence, nothing sent;
 * - Pause, Unpause and Cancel change the run's state, also of a run
 *   waiting for an answer;
 * - a crashed run (its driver killed) and an interrupted one (Ctrl-C) show
 *   the `atomic resume <id>` command, with a button that copies it.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { killSpawned, runAtomic } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { ARTIFACTS, HAVE_CHROMIUM, releaseBrowser, leavePageAndStopServer, launchBrowser, keptPage, signIn, startRun, startServe } from "./browser-support.ts";

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

/**
 * The `wait` stage running, as its driver prints it. On a loaded machine a stage may sit queued for a worker for a
 * long while (it failed once at 30 s in a full fresh-clone run); waiting here first, with room, leaves the page's
 * own check to say only whether the page follows the run (it must show the stage within seconds of it starting).
 */
const waitStarted = (out: { waitFor(re: RegExp, timeoutMs?: number): Promise<string> }) => out.waitFor(/^\s+\S+ wait started/, 90_000);

const runStatusIs = (status: string) => (s: string) => document.body.dataset.runStatus === s;

describe.skipIf(!HAVE_CHROMIUM)("status page actions in Chromium", () => {
  test("questions are answered from the page and a message reaches a running shell stage's stdin, with files attached", async () => {
    const home = makeTempDir();
    writeFileSync(join(home, "config.json"), JSON.stringify({ artifacts: { maxAttachmentBytes: 1024 } }));
    const { proc: server, url, login } = await startServe(home);
    const run = await startRun(home, "interact.ts", []);
    const { page, errors } = await keptPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      // the question with choices: one button per choice
      const first = page.locator(".question", { hasText: "ship it?" });
      await first.waitFor({ timeout: 30_000 });
      expect(await first.locator("button.choice").allTextContents()).toEqual(["yes", "no"]);
      await page.waitForFunction(runStatusIs("awaiting_input"), "awaiting_input", { timeout: 15_000 });
      await page.screenshot({ path: join(ARTIFACTS, "run-question.png"), fullPage: true });
      await first.locator('button.choice[data-choice="yes"]').click();
      // the question without choices: a text box
      const second = page.locator(".question", { hasText: "why?" });
      await second.waitFor({ timeout: 30_000 });
      await first.waitFor({ state: "detached", timeout: 15_000 });
      await second.locator("textarea.answer-text").fill("the tests pass");
      await second.locator("button.answer-send").click();
      await second.waitFor({ state: "detached", timeout: 15_000 });

      // the reader stage runs: a message from the form goes to its stdin
      await page.waitForSelector('svg.graph g.node[data-name="listen"][data-status="running"]', { timeout: 30_000 });
      expect(await page.isVisible("#send-form")).toBe(true);
      await page.fill("#msg-stage", "listen");
      await page.fill("#msg-text", "hello from the page");
      expect(await page.$$eval("#msg-mode option", (os) => os.map((o) => (o as unknown as { value: string }).value))).toEqual(["steer", "followUp", "interrupt"]);
      // a stage name no path of the workflow can reach: refused with the close match, nothing sent
      await page.fill("#msg-stage", "lisen");
      await page.click("#msg-send");
      await page.waitForSelector("#msg-result.error");
      expect(await page.textContent("#msg-result")).toMatch(/^run [0-9a-z]{18} has no stage lisen: no stage of its workflow is named lisen\nhint: .*listen/);
      await page.fill("#msg-stage", "listen");
      // a file over the cap (1 KiB here): one sentence and a hint on the form, nothing sent, the text kept
      await page.setInputFiles("#msg-files", [{ name: "big.txt", mimeType: "text/plain", buffer: Buffer.from("x".repeat(4096)) }]);
      await page.click("#msg-send");
      await page.waitForSelector("#msg-result.error");
      expect(await page.textContent("#msg-result")).toBe("cannot attach big.txt: it is 4.0 KiB, more than the attachment cap of 1.0 KiB\nhint: attach a smaller file, or raise artifacts.maxAttachmentBytes in config.json");
      expect(await page.inputValue("#msg-text")).toBe("hello from the page");
      expect(existsSync(join(home, "artifacts", run.id, "attachments"))).toBe(false);
      const notes = Buffer.from("# Notes\nthe header must be blue\n");
      const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]);
      await page.setInputFiles("#msg-files", [
        { name: "notes.md", mimeType: "text/markdown", buffer: notes },
        { name: "mock.png", mimeType: "image/png", buffer: png },
      ]);
      await page.click("#msg-send");
      await page.waitForFunction(() => document.querySelector("#msg-result")?.textContent?.startsWith("sent to listen"), undefined, { timeout: 15_000 });
      expect(await page.textContent("#msg-result")).toEndWith(", with notes.md, mock.png attached");
      // the copies in the run's artifacts, byte for byte; the message as recorded carries them as --attach does
      const [dir, ...more] = readdirSync(join(home, "artifacts", run.id, "attachments"));
      expect(more).toEqual([]);
      const copies = join(home, "artifacts", run.id, "attachments", dir!);
      expect(readFileSync(join(copies, "notes.md")).equals(notes)).toBe(true);
      expect(readFileSync(join(copies, "mock.png")).equals(png)).toBe(true);
      const box = JSON.parse((await runAtomic(["inbox", run.id, "--json"], { home })).stdout) as { stages: { stage: string; messages: { id: string; text: string }[] }[] };
      const sent = box.stages.find((st) => st.stage === "listen")!.messages;
      expect(sent.map((m) => m.id)).toEqual([dir!]);
      expect(sent[0]!.text).toStartWith(`hello from the page\n\nAttached files (2): ${join(copies, "notes.md")}, ${join(copies, "mock.png")}`);
      expect(sent[0]!.text).toContain(`<file path="${join(copies, "notes.md")}">\n# Notes\nthe header must be blue\n`);
      await page.waitForFunction(runStatusIs("completed"), "completed", { timeout: 30_000 });
      expect(await run.proc.exited).toBe(0);
      await page.click('svg.graph g.node[data-name="listen"]');
      await page.waitForFunction(() => document.querySelector("#stage-stdout")?.textContent === "listening\nheard: hello from the page\n", undefined, { timeout: 15_000 });
      expect(await page.isVisible("#send-form")).toBe(false); // nothing to send to once the run ended
      const detail = (await page.evaluate(async (id) => (await fetch(`/api/runs/${id}`)).json(), run.id)) as { run: { outputs: unknown } };
      expect(detail.run.outputs).toEqual({ ship: "yes", why: "the tests pass", heard: "listening\nheard: hello from the page" });
      expect(errors).toEqual(["Failed to load resource: the server responded with a status of 404 (Not Found)", "Failed to load resource: the server responded with a status of 400 (Bad Request)"]); // the typo, the file over the cap
    } finally {
      await leavePageAndStopServer(page, server);
    }
  }, 120_000);

  test("Pause, Unpause and Cancel change the run's state", async () => {
    const home = makeTempDir();
    const gate = join(makeTempDir(), "gate");
    const { proc: server, url, login } = await startServe(home);
    const run = await startRun(home, "interact.ts", ["skip=true", `gate=${gate}`]);
    const { page, errors } = await keptPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      await waitStarted(run.out);
      await page.waitForSelector('svg.graph g.node[data-name="wait"][data-status="running"]', { timeout: 15_000 });
      await page.click("#btn-pause");
      await page.waitForFunction(runStatusIs("paused"), "paused", { timeout: 15_000 });
      expect(await page.textContent("#btn-pause")).toBe("Unpause");
      await page.click("#btn-pause");
      await page.waitForFunction(runStatusIs("running"), "running", { timeout: 15_000 });
      expect(await page.textContent("#btn-pause")).toBe("Pause");
      page.once("dialog", (d) => void d.accept());
      await page.click("#btn-cancel");
      await page.waitForFunction(runStatusIs("cancelled"), "cancelled", { timeout: 30_000 });
      await run.proc.exited;
      expect(await page.$("#btn-cancel")).toBeNull();

      // a run waiting for an answer has the buttons too
      const asking = await startRun(home, "interact.ts", []);
      await page.goto(`${url}runs/${asking.id}`);
      await page.waitForFunction(runStatusIs("awaiting_input"), "awaiting_input", { timeout: 30_000 });
      expect(await page.textContent("#btn-pause")).toBe("Pause");
      page.once("dialog", (d) => void d.accept());
      await page.click("#btn-cancel");
      await page.waitForFunction(runStatusIs("cancelled"), "cancelled", { timeout: 30_000 });
      await asking.proc.exited;
      expect(await page.$(".question")).toBeNull();
      expect(errors).toEqual([]);
    } finally {
      writeFileSync(gate, "");
      await leavePageAndStopServer(page, server);
    }
  }, 120_000);

  test("one stage is paused and unpaused from its panel (atomic pause RUN STAGE); the run goes on running", async () => {
    const home = makeTempDir();
    const gate = join(makeTempDir(), "gate");
    const { proc: server, url, login } = await startServe(home);
    const run = await startRun(home, "interact.ts", ["skip=true", `gate=${gate}`]);
    const { page, errors } = await keptPage();
    try {
      await signIn(page, login, url);
      await page.goto(`${url}runs/${run.id}`);
      await waitStarted(run.out);
      await page.click('svg.graph g.node[data-name="wait"][data-status="running"]', { timeout: 15_000 });
      await page.waitForSelector("#btn-stage-pause", { timeout: 15_000 });
      expect(await page.textContent("#btn-stage-pause")).toBe("Pause stage");
      await page.click("#btn-stage-pause");
      await page.waitForFunction(() => document.querySelector("#btn-stage-pause")?.textContent === "Unpause stage", undefined, { timeout: 15_000 });
      // The stage's pause is its driver's (recorded, acknowledged); the run itself is not paused.
      const shown = await runAtomic(["show", run.id, "--json"], { home });
      expect((JSON.parse(shown.stdout) as { pausedStages?: string[] }).pausedStages).toEqual(["wait"]);
      expect(await page.evaluate(() => document.body.dataset.runStatus)).toBe("running");
      expect(await page.textContent("#btn-pause")).toBe("Pause");
      await page.click("#btn-stage-pause");
      await page.waitForFunction(() => document.querySelector("#btn-stage-pause")?.textContent === "Pause stage", undefined, { timeout: 15_000 });
      expect((JSON.parse((await runAtomic(["show", run.id, "--json"], { home })).stdout) as { pausedStages?: string[] }).pausedStages).toBeUndefined();
      writeFileSync(gate, "");
      await page.waitForFunction(runStatusIs("completed"), "completed", { timeout: 30_000 });
      expect(await run.proc.exited).toBe(0);
      await page.waitForSelector("#btn-stage-pause", { state: "detached", timeout: 15_000 });
      expect(errors).toEqual([]);
    } finally {
      writeFileSync(gate, "");
      await leavePageAndStopServer(page, server);
    }
  }, 120_000);

  test("a crashed run and an interrupted run show the atomic resume command, which copies", async () => {
    const home = makeTempDir();
    const gate = join(makeTempDir(), "gate");
    // Without recovery: the local service would resume the crashed run before the page shows it crashed.
    const { proc: server, url, login } = await startServe(home, undefined, ["--no-recover"]);
    const { page, errors } = await keptPage();
    await page.context().grantPermissions(["clipboard-read", "clipboard-write"], { origin: url.replace(/\/$/, "") });
    try {
      await signIn(page, login, url);
      for (const [signal, status] of [["SIGKILL", "crashed"], ["SIGINT", "interrupted"]] as const) {
        const run = await startRun(home, "interact.ts", ["skip=true", `gate=${gate}`]);
        await page.goto(`${url}runs/${run.id}`);
        await waitStarted(run.out);
        await page.waitForSelector('svg.graph g.node[data-name="wait"][data-status="running"]', { timeout: 15_000 });
        expect(await page.isVisible("#resume")).toBe(false);
        run.proc.kill(signal);
        await run.proc.exited;
        await page.waitForFunction(runStatusIs(status), status, { timeout: 60_000 });
        await page.waitForSelector("#resume-cmd", { timeout: 15_000 });
        expect(await page.textContent("#resume-cmd")).toBe(`atomic resume ${run.id}`);
        await page.click("#btn-copy-resume");
        await page.waitForFunction(() => /copied|selected/.test(document.querySelector("#resume .muted")?.textContent ?? ""), undefined, { timeout: 5_000 });
        const copied = await page.evaluate(() => (globalThis as unknown as { navigator: { clipboard: { readText(): Promise<string> } } }).navigator.clipboard.readText()).catch(() => undefined);
        if (copied !== undefined) expect(copied).toBe(`atomic resume ${run.id}`);
        await page.screenshot({ path: join(ARTIFACTS, `run-${status}.png`), fullPage: true });
      }
      expect(errors).toEqual([]);
    } finally {
      writeFileSync(gate, "");
      await leavePageAndStopServer(page, server);
    }
  }, 180_000);
});

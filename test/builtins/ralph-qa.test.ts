/**
 * ralph's QA evidence through dist/atomic, with the real headless Chromium:
 * the implementation writes app.html, the end-to-end check (qa_command, a
 * playwright-core script: fixtures/qa-check.ts) opens it in the worktree,
 * clicks it and saves a screenshot of each step in $ATOMIC_QA_DIR; ralph
 * records the check's terminal as an asciicast v2 file. The reviewers are
 * told the check's outcome; reviewer B does not approve and max_loops is
 * 1, so the pull request (a fake gh) is opened marked as needing a person,
 * its body the reviewers' objections and the QA evidence: the recording and
 * both step screenshots (real PNGs of each step), committed on the pushed
 * branch under specs/qa/<run id>/loop-01/ and linked there
 * (../blob/<branch>/<path>, from the pull request's page). The research
 * notes are committed in the repository under the notes_dir given.
 */

import { afterAll, afterEach, describe, expect } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { text, toolCall, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { BUN, ROOT } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, heavyTest } from "../e2e/support.ts";
import { artifacts, runBuiltin, scriptedServer } from "./support.ts";
import { gitRepo, inRepo } from "./git-support.ts";
import { pngFile } from "./png.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const HAVE_CHROMIUM = existsSync("/usr/bin/chromium");
const lastUser = (req: RecordedRequest) => req.body.messages.filter((m) => m.role === "user").at(-1)?.content ?? "";
const stageOf = (_first: string, req: RecordedRequest) => {
  const p = lastUser(req);
  if (p.startsWith("You refine")) return "refine";
  if (p.startsWith("You research")) return "research";
  if (p.startsWith("You are the orchestrator")) return "implement";
  const r = /^You are reviewer ([AB])/.exec(p);
  if (r) return `review-${r[1]!.toLowerCase()}`;
  if (p.startsWith("You consolidate")) return "consolidate";
  return `unknown: ${p.slice(0, 40)}`;
};

const APP =
  `<!doctype html>\n<html><head><title>Counter</title><style>body{margin:0;background:#ffffff}body.done{background:#33cc66}</style></head>` +
  `<body><button id="go" onclick="document.body.className='done';document.getElementById('status').textContent='done'">go</button><p id="status">waiting</p></body></html>\n`;

const answers = (stage: string, n: number): Reply => {
  if (stage === "refine") return toolCall("structured_output", { question: "how is the counter built?" });
  if (stage === "research") return text("notes: the counter is app.html");
  if (stage === "implement") return n === 0 ? toolCall("write", { path: "app.html", content: APP }) : text("wrote app.html");
  if (stage === "review-a") return toolCall("structured_output", { approved: true, findings: [] });
  if (stage === "review-b") return toolCall("structured_output", { approved: false, findings: ["the button has no label for screen readers"] });
  if (stage === "consolidate") return text("- label the button");
  return { status: 500, body: `unexpected stage ${stage}` };
};

describe.skipIf(!HAVE_CHROMIUM)("ralph QA evidence with Chromium", () => {
  heavyTest(
    "the end-to-end check's step screenshots (real PNGs) and terminal recording go to the run and into the pull request marked as needing a person",
    async () => {
      const s = await scriptedServer(stageOf, answers);
      try {
        const repo = gitRepo("gh");
        const check = `${BUN} ${join(ROOT, "test", "builtins", "fixtures", "qa-check.ts")}`;
        const inputs = ["prompt=A counter page", "model=fake-model", "max_loops=1", "create_pr=true", "notes_dir=specs/notes", `qa_command=${check}`];
        const r = await inRepo(s, repo, (home) => runBuiltin("ralph", inputs, s, home, repo.dir));
        expect(r.code).toBe(1);
        expect(r.status).toBe("failed");
        const dir = `${repo.dir}/.atomic/runs/ralph-${r.runId}`;
        const branch = `atomic/ralph-${r.runId}`;
        const qa = `${dir}/qa-01`;
        const shots = [`${qa}/step-01-opened.png`, `${qa}/step-02-clicked.png`];
        expect(r.outputs.qa).toEqual({
          command: check,
          exit_code: 0,
          cast: `${qa}/terminal.cast`,
          screenshots: shots,
          tail: "step 1: opened app.html, title Counter\nstep 2: clicked, the page says done\n",
        });
        // each step's screenshot is a real PNG of the page at that step
        expect(await pngFile(shots[0]!)).toEqual({ width: 640, height: 480, first: [0xff, 0xff, 0xff] });
        expect(await pngFile(shots[1]!)).toEqual({ width: 640, height: 480, first: [0x33, 0xcc, 0x66] });
        // the terminal recording is asciicast v2: a header, then [seconds, "o", text] events in time order
        const [header, ...events] = (await Bun.file(`${qa}/terminal.cast`).text()).trimEnd().split("\n").map((l) => JSON.parse(l));
        expect(header).toMatchObject({ version: 2, width: 100, height: 30, title: `ralph ${r.runId}, loop 1: ${check}` });
        expect(events.length).toBeGreaterThan(0);
        for (const [k, e] of events.entries()) {
          expect(e[1]).toBe("o");
          expect(e[0]).toBeGreaterThanOrEqual(k === 0 ? 0 : events[k - 1][0]);
        }
        expect(events.map((e) => e[2]).join("")).toBe("step 1: opened app.html, title Counter\r\nstep 2: clicked, the page says done\r\n");
        // the reviewers were told the check's outcome
        const review = lastUser(s.server.requests.find((q) => stageOf("", q) === "review-b")!);
        expect(review).toContain(`The end-to-end check (${check}) exited 0 and saved 2 screenshot(s); its last output:\nstep 1: opened app.html`);
        expect(JSON.parse(artifacts(dir)["ralph-ledger.json"]!).loops[0].qa).toEqual(r.outputs.qa);

        // the pull request: needing a person, the objections and the QA evidence linked
        const [call, ...more] = repo.ghCalls();
        expect(more).toEqual([]);
        expect(call!.slice(0, 2)).toEqual(["pr", "create"]);
        expect(call![call!.indexOf("--title") + 1]).toBe("[needs a person] ralph: A counter page");
        const body = call![call!.indexOf("--body") + 1]!;
        expect(body).toContain("## Escalation evidence: the reviewers' objections (loop 1)\n\n### Reviewer B\n\n- the button has no label for screen readers");
        const qaInRepo = `specs/qa/${r.runId}/loop-01`;
        const link = (name: string) => `[${qaInRepo}/${name}](../blob/${branch}/${qaInRepo}/${name})`;
        expect(body).toContain(
          `## QA evidence (loop 1)\n\nThe end-to-end check \`${check}\` passed.\n\n` +
            `The evidence is committed on this branch under \`${qaInRepo}/\`.\n\n` +
            `Terminal recording (asciicast v2; \`asciinema play\` replays it): ${link("terminal.cast")}\n\n` +
            `Screenshots of its steps:\n\n1. ${link("step-01-opened.png")}\n2. ${link("step-02-clicked.png")}\n`,
        );
        // the evidence is on the pushed branch, byte for byte the run's files
        for (const f of ["terminal.cast", "step-01-opened.png", "step-02-clicked.png"]) {
          const pushed = Bun.spawnSync(["git", "--git-dir", repo.origin, "show", `${branch}:${qaInRepo}/${f}`]).stdout;
          expect(Buffer.compare(Buffer.from(pushed), Buffer.from(await Bun.file(`${qa}/${f}`).bytes()))).toBe(0);
        }
        expect(repo.git("log", "-1", "--format=%s", branch)).toBe(`atomic: QA evidence of ralph run ${r.runId}, loop 1`);
        expect(r.outputs.pull_request).toBe("https://github.example/acme/project/pull/7");
        // the research notes are committed in the repository, under notes_dir
        const date = new Date().toISOString().slice(0, 10);
        expect(repo.git("show", `${branch}:specs/notes/01-${date}.md`)).toBe(`# Research, loop 1 (${date})\n\nQuestion: how is the counter built?\n\nnotes: the counter is app.html`);
        expect(repo.git("show", `${branch}:app.html`)).toBe(APP.trimEnd());
      } finally {
        await s.close();
      }
    },
    120_000,
  );
});

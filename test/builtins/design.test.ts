/**
 * design through dist/atomic against the scripted fake OpenAI server and
 * the real headless Chromium: the discovery agent (discover) asks its
 * questions through ask_user, answered with `atomic answer` (output type,
 * brief additions, references: a file, a URL served here, a missing file),
 * and answers with what it learned from the conversation; the design-system stage's invalid structured answer
 * re-asked, the patterns stage a provider error (its section marked
 * unavailable), round 1 steered, round 2 accepted and exported; each
 * round's screenshot a real PNG of that round's preview (signature,
 * 1280x800, the page's background colour in its first pixel); artifacts
 * file by file. SIGKILL at a random stage boundary or open question and
 * resume re-runs no recorded stage and ends with the same outputs and
 * files. Without Chromium the review goes on without screenshots and says
 * why; discard ends the run cancelled without a spec; an interviewer that
 * fails leaves the workflow to ask the same questions itself. The builtin's name
 * is open-claude-design; `design` is its alias (both run here). A local
 * HTML reference page (served by no one: a file) and a page served by the
 * test are visited in Chromium: a full-page PNG as long as the page and a
 * scroll sequence of 1280x800 PNGs (real PNGs of each part of the page),
 * named to the designer, each by a sandboxed stage that reaches only its
 * reference's host (a stylesheet the pages ask of another local server is
 * never requested); a reference URL that does not load is said in one
 * sentence with a hint and the design goes on; an accepted design's files
 * go to the repository under specs/design/<run id>/, or the specs_dir
 * given.
 */

import { afterAll, afterEach, describe, expect } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { runAtomic } from "../helpers/atomic.ts";
import { toolCall, text, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest, heavyTest } from "../e2e/support.ts";
import { png, pngFile } from "./png.ts";
import { artifacts, promptOf, drive, homeAndCwd, normalized, pick, scriptedServer, withoutRecorded, type Question } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const HAVE_CHROMIUM = Bun.which("chromium") !== null;

const stageOf = (prompt: string) => {
  if (prompt.startsWith("You are the design interviewer")) return "discover";
  if (prompt.startsWith("You are the design-system locator")) return "design-system";
  if (prompt.startsWith("You are the design analyst")) return "analysis";
  if (prompt.startsWith("You are the pattern researcher")) return "patterns";
  const g = /^You are the designer \(round (\d+)\)/.exec(prompt);
  if (g) return `generate-${g[1]!.padStart(2, "0")}`;
  if (prompt.startsWith("You are the spec writer")) return "export";
  return `unknown: ${prompt.slice(0, 40)}`;
};

const page = (colour: string, title: string) => `<!doctype html>\n<html><body style="margin:0;background:${colour}"><h1>${title}</h1></body></html>\n`;

/** The interviewer: each question it was told to ask (quoted in its prompt) through ask_user, then what the answers say. */
function interviewer(req: RecordedRequest): Reply {
  const prompt = promptOf(req);
  const asked = [...prompt.matchAll(/^\d\. "([^"]+)"/gm)].map((m) => m[1]!);
  const got = req.body.messages.filter((m) => m.role === "tool").map((m) => String(m.content));
  if (got.length < asked.length) {
    return toolCall("ask_user", got.length === 0 ? { question: asked[0]!, choices: ["web page", "app screen", "component", "slide", "email", "other"] } : { question: asked[got.length]! });
  }
  return toolCall("structured_output", { output_type: got[0], additions: got[1], references: got[2] ? got[2].split(" ").filter((r) => r !== "none") : [] });
}

const answers = (stage: string, n: number, req: RecordedRequest): Reply => {
  if (stage === "discover") return interviewer(req);
  if (stage === "design-system") {
    return n === 0
      ? toolCall("structured_output", { found: "yes" })
      : toolCall("structured_output", { found: true, paths: ["brand.md"], summary: "blue brand, Inter" });
  }
  if (stage === "analysis") return text("audience: developers");
  if (stage === "patterns") return { status: 400, body: JSON.stringify({ error: { message: "patterns refused" } }) };
  if (stage === "generate-01") return text("Here it is:\n```html\n" + page("#3366cc", "Pricing") + "```\n");
  if (stage === "generate-02") return text(page("#33cc66", "Pricing"));
  if (stage === "export") return text(page("#ffffff", "Spec"));
  return { status: 500, body: `unexpected stage ${stage}` };
};

const reply = (refs: string) => (q: Question): string => {
  if (q.question.startsWith("What should this design produce")) return "web page";
  if (q.question.startsWith("Anything to add")) return "make it blue";
  if (q.question.startsWith("References for the design")) return refs;
  if (q.question.startsWith("Review the design (round 1)")) return "steer";
  if (q.question.startsWith("What should change")) return "make the background green";
  if (q.question.startsWith("Review the design (round 2)")) return "accept";
  throw new Error(`unexpected question ${q.question}`);
};

const FULL = { discover: 4, "design-system": 2, analysis: 1, patterns: 1, "generate-01": 1, "generate-02": 1, export: 1 };

describe.skipIf(!HAVE_CHROMIUM)("design with Chromium", () => {
  heavyTest(
    "references visited in Chromium: a local page and a served one captured full-page and as a scroll sequence (real PNGs), a URL that does not load said in one sentence; accepted at once, its files under the specs_dir given",
    async () => {
      const s = await scriptedServer(stageOf, answers);
      // Two bands, red then blue, each 1000px high: the full page shows both, the scroll sequence one viewport each.
      // A host no reference names: the pages ask it for a stylesheet, which their sandbox does not let them reach.
      const elsewhere: string[] = [];
      const tracker = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (req) => (elsewhere.push(new URL(req.url).pathname), new Response("", { headers: { "content-type": "text/css" } })) });
      const foreign = (from: string) => `<link rel="stylesheet" href="http://127.0.0.1:${tracker.port}/${from}.css">`;
      const long = `<!doctype html>\n<html><head><title>Their pricing</title>${foreign("from-file")}</head><body style="margin:0"><div style="height:1000px;background:#cc3333"></div><div style="height:1000px;background:#3333cc"></div></body></html>\n`;
      const site = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response(page("#33cc99", "A gallery").replace("<html>", `<html><head>${foreign("from-site")}</head>`), { headers: { "content-type": "text/html" } }) });
      const closed = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") });
      const dead = `http://127.0.0.1:${closed.port}/pricing`;
      await closed.stop(true);
      try {
        const { home, cwd } = homeAndCwd();
        writeFileSync(`${cwd}/ref.html`, long);
        const url = `http://127.0.0.1:${site.port}/gallery`;
        const r = await drive(
          ["run", "open-claude-design", "--input", "prompt=a pricing page", "--input", "model=fake-model", "--input", "references=ref.html", "--input", `references=${url}`, "--input", `references=${dead}`, "--input", "specs_dir=docs/designs"],
          s,
          home,
          cwd,
          (q) => (q.question.startsWith("Review the design") ? "accept" : reply("")(q)),
        );
        expect(r.stderr).toBe("");
        expect(r.code).toBe(0);
        const dir = `${cwd}/.atomic/runs/open-claude-design-${r.runId}`;
        // each reference reached only its own host (or, a file, none): the pages' requests elsewhere never arrived
        expect(elsewhere).toEqual([]);
        // Through the sandbox's tunnel to the named port, a port nobody listens on reads as an empty response or a
        // socket closed or reset (which one is a race of the tunnel's close): one sentence with the hint each way.
        const deadSentence = (r.outputs.reference_screenshots as { error: string | null }[])[2]!.error!;
        expect(deadSentence).toMatch(new RegExp(`^the reference ${dead} did not load \\(net::ERR_(EMPTY_RESPONSE|SOCKET_NOT_CONNECTED|CONNECTION_RESET) at ${dead}\\); check the address \\(is the site up, the file there\\?\\) or leave it out\\.$`));
        const shots = [
          { reference: "ref.html", full: `${dir}/reference-01-full.png`, scroll: [`${dir}/reference-01-scroll-01.png`, `${dir}/reference-01-scroll-02.png`, `${dir}/reference-01-scroll-03.png`], error: null },
          { reference: url, full: `${dir}/reference-02-full.png`, scroll: [`${dir}/reference-02-scroll-01.png`], error: null },
          { reference: dead, full: null, scroll: [], error: deadSentence },
        ];
        expect(r.outputs).toMatchObject({ decision: "accepted", rounds: 1, reference_screenshots: shots, specs: `${cwd}/docs/designs/${r.runId}` });
        // the page that did not load, in the run's output: one sentence, no stack
        expect(r.stdout).toContain(`design: ${deadSentence}`);
        // real PNGs of each part: the full page is as long as the page; the scroll sequence one viewport apart (the last one at the bottom)
        expect(await pngFile(`${dir}/reference-01-full.png`)).toEqual({ width: 1280, height: 2000, first: [0xcc, 0x33, 0x33] });
        expect(await pngFile(`${dir}/reference-01-scroll-01.png`)).toEqual({ width: 1280, height: 800, first: [0xcc, 0x33, 0x33] });
        expect(await pngFile(`${dir}/reference-01-scroll-02.png`)).toEqual({ width: 1280, height: 800, first: [0xcc, 0x33, 0x33] });
        expect(await pngFile(`${dir}/reference-01-scroll-03.png`)).toEqual({ width: 1280, height: 800, first: [0x33, 0x33, 0xcc] });
        expect(await pngFile(`${dir}/reference-02-full.png`)).toEqual({ width: 1280, height: 800, first: [0x33, 0xcc, 0x99] });
        const generate = s.server.requests.map((q) => q.body.messages.find((m) => m.role === "user")!.content ?? "").find((p) => p.startsWith("You are the designer (round 1)"))!;
        expect(generate).toContain(
          `Screenshots of the references (a full page, then a scroll sequence of 1280x800 viewports from the top):\n` +
            `- ref.html: ${shots[0]!.full}; scroll: ${shots[0]!.scroll.join(", ")}\n- ${url}: ${shots[1]!.full}; scroll: ${shots[1]!.scroll[0]}\n- ${dead}: not captured: ${deadSentence}`,
        );
        const files = artifacts(dir);
        expect(Object.keys(files)).toEqual([
          "brief.json", "design-context.md", "preview.html",
          "reference-01-full.png", "reference-01-scroll-01.png", "reference-01-scroll-02.png", "reference-01-scroll-03.png",
          "reference-02-full.png", "reference-02-scroll-01.png", "references.json", "review.json", "screenshot-01.png", "spec.html",
        ]);
        expect(JSON.parse(files["references.json"]!)).toEqual(shots);
        expect(artifacts(`${cwd}/docs/designs/${r.runId}`)).toEqual(files);
        expect(existsSync(`${cwd}/specs`)).toBe(false);
      } finally {
        await tracker.stop(true);
        await site.stop(true);
        await s.close();
      }
    },
    120_000,
  );

  // heavy: atomic starts Chromium for every round's screenshot
  heavyTest(
    "interview answered, references read, analysis in parallel, screenshots are PNGs of each preview, steer then accept exports spec.html; SIGKILL and resume",
    async () => {
      const s = await scriptedServer(stageOf, answers);
      const refs = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("a gallery of pricing pages") });
      try {
        const url = `http://127.0.0.1:${refs.port}/gallery`;
        const setup = () => {
          const hc = homeAndCwd();
          writeFileSync(`${hc.cwd}/brand.md`, "Brand: blue #3366cc");
          return hc;
        };
        const { home, cwd } = setup();
        const r = await drive(["run", "design", "--input", "prompt=a pricing page", "--input", "model=fake-model"], s, home, cwd, reply(`brand.md ${url} missing.md`));
        expect(r.stderr).toBe("");
        expect(r.code).toBe(0);
        expect(Object.fromEntries(s.counts)).toEqual(FULL);
        expect(r.answered.map((q) => q.slice(0, 30))).toEqual([
          "What should this design produce",
          "Anything to add to or correct i",
          "References for the design: URL",
          "Review the design (round 1): s",
          "What should change in the desi",
          "Review the design (round 2): s",
        ].map((q) => q.slice(0, 30)));
        const dir = `${cwd}/.atomic/runs/open-claude-design-${r.runId}`;
        expect(r.outputs).toEqual({
          decision: "accepted",
          rounds: 2,
          preview: `${dir}/preview.html`,
          screenshot: `${dir}/screenshot-02.png`,
          context: `${dir}/design-context.md`,
          reference_screenshots: [{ reference: url, full: `${dir}/reference-02-full.png`, scroll: [`${dir}/reference-02-scroll-01.png`], error: null }],
          dir,
          spec: `${dir}/spec.html`,
          specs: `${cwd}/specs/design/${r.runId}`,
        });
        expect(r.answered[3]).toContain(`screenshot ${dir}/screenshot-01.png; page ${dir}/preview.html`);

        const files = artifacts(dir);
        // the accepted design's files, also in the repository under specs/design/<run id>/
        expect(artifacts(`${cwd}/specs/design/${r.runId}`)).toEqual(files);
        expect(Object.keys(files)).toEqual(["brief.json", "design-context.md", "preview.html", "reference-02-full.png", "reference-02-scroll-01.png", "references.json", "review.json", "screenshot-01.png", "screenshot-02.png", "spec.html"]);
        expect(files["preview.html"]).toBe(page("#33cc66", "Pricing"));
        expect(files["spec.html"]).toBe(page("#ffffff", "Spec"));
        const brief = JSON.parse(files["brief.json"]!);
        expect(brief).toMatchObject({ prompt: "a pricing page", interviewed_by: "discover", output_type: "web page", additions: "make it blue" });
        expect(brief.references).toEqual([
          { reference: "brand.md", error: null },
          { reference: url, error: null },
          { reference: "missing.md", error: expect.stringContaining("missing.md") },
        ]);
        const context = files["design-context.md"]!;
        expect(context).toStartWith("# Design context\n\na pricing page\n\nAdded in the interview: make it blue\n\nOutput type: web page\n\n");
        expect(context).toContain("## Design system\n\nFound: brand.md\n\nblue brand, Inter\n");
        expect(context).toContain("## Analysis\n\naudience: developers\n");
        expect(context).toMatch(/## Patterns\n\n\(unavailable: .*patterns refused/);
        expect(JSON.parse(files["review.json"]!)).toEqual([
          { round: 1, decision: "steer", feedback: "make the background green", screenshot: `${dir}/screenshot-01.png` },
          { round: 2, decision: "accept", feedback: null, screenshot: `${dir}/screenshot-02.png` },
        ]);
        // the analysts saw the references; round 2 regenerated from round 1 and the feedback
        const prompts = s.server.requests.map((q) => q.body.messages.find((m) => m.role === "user")!.content ?? "");
        const analystPrompt = prompts.find((p) => p.startsWith("You are the design analyst"))!;
        expect(analystPrompt).toContain("### brand.md\nBrand: blue #3366cc");
        expect(analystPrompt).toContain(`### ${url}\na gallery of pricing pages`);
        expect(analystPrompt).toContain("### missing.md\n(could not be read:");
        const second = prompts.find((p) => p.startsWith("You are the designer (round 2)"))!;
        expect(second).toContain(`Your previous preview:\n${page("#3366cc", "Pricing")}`);
        expect(second).toContain("The reviewer asked for these changes:\nmake the background green");
        // each screenshot is a real PNG of its round's preview
        expect(png(Buffer.from(await Bun.file(`${dir}/screenshot-01.png`).arrayBuffer()))).toEqual({ width: 1280, height: 800, first: [0x33, 0x66, 0xcc] });
        expect(png(Buffer.from(await Bun.file(`${dir}/screenshot-02.png`).arrayBuffer()))).toEqual({ width: 1280, height: 800, first: [0x33, 0xcc, 0x66] });

        const same = (runId: string, at: string) => {
          const f = artifacts(`${at}/.atomic/runs/open-claude-design-${runId}`);
          for (const png of ["screenshot-01.png", "screenshot-02.png", "reference-02-full.png", "reference-02-scroll-01.png"]) delete f[png];
          return normalized(f, runId, at);
        };
        // Every point is after the interviewer's stage completed, so the resume replays it with its recorded ask_user
        // questions (a kill while one is open is test/runners/ask-user.test.ts's).
        const at = pick("design", [
          "design-system",
          "analysis",
          "patterns",
          "generate-01",
          "ask:Review the design (round 1)",
          "ask:What should change",
          "generate-02",
          "ask:Review the design (round 2)",
          "export",
        ]);
        s.counts.clear();
        const k = setup();
        const killed = await drive(["run", "design", "--input", "prompt=a pricing page", "--input", "model=fake-model"], s, k.home, k.cwd, reply(`brand.md ${url} missing.md`), at);
        expect(killed.killed).toBe(true);
        s.counts.clear();
        const resumed = await drive(["resume", killed.runId], s, k.home, k.cwd, reply(`brand.md ${url} missing.md`));
        expect(resumed.stderr).toBe("");
        expect(resumed.code).toBe(0);
        expect(Object.fromEntries(s.counts)).toEqual(withoutRecorded(FULL, killed.recorded));
        expect(normalized([...killed.answered, ...resumed.answered], killed.runId, k.cwd)).toEqual(normalized(r.answered, r.runId, cwd));
        expect(normalized(resumed.outputs, resumed.runId, k.cwd)).toEqual(normalized(r.outputs, r.runId, cwd));
        expect(same(resumed.runId, k.cwd)).toEqual(same(r.runId, cwd));
        // a screenshot (a shell stage: not counted by the fake) recorded before the kill was not taken again
        const show = JSON.parse((await runAtomic(["show", resumed.runId, "--json"], { home: k.home, env: s.env })).stdout) as { steps: { name: string; attempts: number }[] };
        for (const shot of ["screenshot-01", "screenshot-02"]) {
          expect({ shot, attempts: show.steps.find((st) => st.name === shot)!.attempts }).toEqual({ shot, attempts: 1 });
        }
        const kdir = `${k.cwd}/.atomic/runs/open-claude-design-${resumed.runId}`;
        expect(png(Buffer.from(await Bun.file(`${kdir}/screenshot-02.png`).arrayBuffer()))).toEqual({ width: 1280, height: 800, first: [0x33, 0xcc, 0x66] });
      } finally {
        await refs.stop(true);
        await s.close();
      }
    },
    300_000,
  );
});

e2eTest("without Chromium the review says why and goes on; discard ends the run cancelled without a spec; a failed interviewer leaves the questions to the workflow", async () => {
  const s = await scriptedServer(stageOf, (stage, n, req) => (stage === "discover" ? { status: 400, body: JSON.stringify({ error: { message: "no interviews" } }) } : answers(stage, n, req)));
  try {
    const { home, cwd } = homeAndCwd();
    writeFileSync(`${cwd}/brand.md`, "Brand: blue");
    const r = await drive(
      ["run", "design", "--input", "prompt=a pricing page", "--input", "model=fake-model", "--input", "references=brand.md", "--input", "chromium=/nonexistent/chrome"],
      s,
      home,
      cwd,
      (q) => (q.question.startsWith("Review the design") ? "discard" : reply("")(q)),
    );
    expect(r.status).toBe("cancelled");
    expect(r.code).toBe(4);
    expect(r.answered).toHaveLength(3);
    // the interviewer failed: the workflow asked the same questions itself
    expect(r.answered[0]).toStartWith("What should this design produce? Brief: a pricing page");
    expect(r.answered[1]).toStartWith("Anything to add to or correct in the brief");
    expect(r.stdout).toContain("design: the interviewer gave no usable answer (");
    expect(r.stdout).toContain("no interviews); asking the questions directly.");
    expect(r.answered[2]).toContain("no screenshot: /nonexistent/chrome (the chromium input) is not an executable program; page ");
    const dir = `${cwd}/.atomic/runs/open-claude-design-${r.runId}`;
    expect(r.outputs).toMatchObject({ decision: "discarded", rounds: 1, screenshot: null, spec: null, specs: null });
    expect(Object.keys(artifacts(dir))).toEqual(["brief.json", "design-context.md", "preview.html", "review.json"]);
    expect(JSON.parse(artifacts(dir)["brief.json"]!)).toMatchObject({ interviewed_by: "questions", output_type: "web page", additions: "make it blue" });
    expect(existsSync(`${cwd}/specs`)).toBe(false);
    expect(s.counts.get("export")).toBeUndefined();

    // ATOMIC_CHROMIUM names it when the input does not
    const e = homeAndCwd();
    const viaEnv = await drive(
      ["run", "open-claude-design", "--input", "prompt=a pricing page", "--input", "model=fake-model", "--input", "references=none.md"],
      { ...s, env: { ...s.env, ATOMIC_CHROMIUM: "/nonexistent/env-chrome" } },
      e.home,
      e.cwd,
      (q) => (q.question.startsWith("Review the design") ? "discard" : reply("")(q)),
    );
    expect(viaEnv.answered[2]).toContain("no screenshot: /nonexistent/env-chrome (ATOMIC_CHROMIUM) is not an executable program; page ");
  } finally {
    await s.close();
  }
});

/**
 * The seven builtins that real-cli.test.ts and tournament.test.ts do not
 * run on a real agent CLI, each end to end through dist/atomic with the
 * real pi CLI (test/agents) running every agent stage, against ONE fake
 * provider scripted per stage (the stage told by its prompt): the smallest
 * run each builtin allows (one round, one turn, one loop, two candidates),
 * the tests concurrent within heavy.ts's slots and each run on one worker,
 * so at most two pi processes at once. pi has no native structured output:
 * structured answers come back as JSON text (the runner asks for it and
 * parses it); file changes are pi's own `bash` tool calls; the design
 * interviewer's question is pi's `ask_user` (atomic's pi extension: the
 * stage parks with pi gone and pi's session resumes with the answer).
 *
 * pi runs each builtin's lead stages; the role stages a builtin lets an
 * input move to another runner (adversarial-verification's verifiers,
 * generate-and-filter's filter and judge, goal's and ralph's reviewers,
 * open-claude-design's three analysts) run on atomic's openai runner against
 * the same fake provider, as the builtins' fake-provider tests run every
 * stage (test/builtins/*.test.ts), answering through its structured_output
 * tool. A pi start proves nothing for them that the file's other pi stages
 * do not: the JSON-text answers parsed (classify-and-act's classifier,
 * best-of-n's judge, ralph's refiner, the design interviewer), plain text
 * (the workers, the candidates, the researcher, the designer), pi's shell
 * and its ask_user; and the per-role runner inputs get a run each
 * (docs/design/testing.md, "Session 14: real-cli-pi's role stages").
 *
 * Each test checks what the fake-provider tests of the same builtin check
 * at this size: the outputs, each stage's requests, the artifacts, and for
 * the git builtins the branch, the commits and the fake `gh` call.
 */

import { afterAll, afterEach, beforeAll, expect } from "bun:test";
import { existsSync } from "node:fs";
import { text, toolCall, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { runAtomic } from "../helpers/atomic.ts";
import { cleanupNow, cleanupWhenIdle, heavyTest } from "../e2e/support.ts";
import { withAgentNode } from "../helpers/agents.ts";
import { chatAgentSetup, MODEL } from "../helpers/chat-agents.ts";
import { artifacts, drive, promptOf, scriptedServer, type Finished, type Scripted } from "./support.ts";
import { gitRepo } from "./git-support.ts";

afterEach(cleanupWhenIdle);
afterAll(async () => {
  await s?.close();
  await cleanupNow();
});

const pad = (n: string) => n.padStart(2, "0");

/** Every builtin's stages by their prompts (most specific first: a later prompt may quote an earlier stage's answer). */
const PATTERNS: [RegExp, (m: RegExpExecArray) => string][] = [
  [/You are verifier (\d+) for criterion ([a-z0-9-]+) \(round (\d+)\)(, asked again)?/, (m) => `av:verify-${pad(m[3]!)}-${m[2]}-${m[1]}${m[4] ? "-again" : ""}`],
  [/You are the worker, repairing/, () => "av:repair"],
  [/You are the worker\. Do the task/, () => "av:work"],
  [/You are the consolidator/, () => "av:consolidate"],
  [/^Candidates made this change/, () => "bon:judge"],
  [/You are candidate (\d+) of/, (m) => `bon:candidate-${m[1]}`],
  [/You are the classifier/, () => "ca:classify"],
  [/This request was classified as/, () => "ca:act"],
  [/You are candidate generator (\d+)/, (m) => `gf:candidate-${m[1]}`],
  [/You are the filter/, () => "gf:filter"],
  [/You are the judge/, () => "gf:judge"],
  [/You are the orchestrator of a goal, turn (\d+)/, (m) => `goal:orchestrator-${pad(m[1]!)}`],
  [/You are the (\w+) reviewer of turn (\d+)/, (m) => `goal:review-${pad(m[2]!)}-${m[1]}`],
  [/You refine the research question for loop (\d+)/, (m) => `ralph:refine-${pad(m[1]!)}`],
  [/You research loop (\d+)/, (m) => `ralph:research-${pad(m[1]!)}`],
  [/You are the orchestrator of loop (\d+)/, (m) => `ralph:implement-${pad(m[1]!)}`],
  [/You are reviewer ([AB]) of loop (\d+)/, (m) => `ralph:review-${pad(m[2]!)}-${m[1]!.toLowerCase()}`],
  [/You are the design interviewer/, () => "design:discover"],
  [/You are the design-system locator/, () => "design:design-system"],
  [/You are the design analyst/, () => "design:analysis"],
  [/You are the pattern researcher/, () => "design:patterns"],
  [/You are the designer \(round (\d+)\)/, (m) => `design:generate-${pad(m[1]!)}`],
  [/You are the spec writer/, () => "design:export"],
];

const stageOf = (prompt: string) => {
  for (const [re, name] of PATTERNS) {
    const m = re.exec(prompt);
    if (m) return name(m);
  }
  return `unknown: ${prompt.slice(0, 60)}`;
};

/** A structured answer: JSON text for pi, the structured_output tool's call for the openai runner (which offers it). */
const json = (value: unknown, req: RecordedRequest) =>
  (req.body.tools ?? []).some((t) => t.function.name === "structured_output") ? toolCall("structured_output", value as Record<string, unknown>) : text(JSON.stringify(value));
const hasToolResult = (req: RecordedRequest) => req.body.messages.some((m) => m.role === "tool");
/** pi's shell tool writing `content` into `path` (relative to the stage's directory). */
const writeFile = (path: string, content: string) => toolCall("bash", { command: `printf '%s\\n' ${JSON.stringify(content)} > ${path}` });
const PAGE = "<!doctype html>\n<html><body><h1>Pricing</h1></body></html>";

const answers = (stage: string, _n: number, req: RecordedRequest): Reply => {
  const [builtin, name] = stage.split(":") as [string, string];
  const conversation = JSON.stringify(req.body.messages);
  switch (builtin) {
    case "av": {
      if (name === "work") return text("the guide, draft one");
      // verifier 1 approves; verifier 2 vetoes: the quorum of 0.5 is reached despite the veto
      const veto = name.endsWith("-2");
      return json({ criterion_id: "accuracy", score: veto ? 6 : 18, evidence: ["read it"], findings: veto ? [{ finding: "a date is wrong", severity: "veto" }] : [] }, req);
    }
    case "bon": {
      if (name === "judge") return json({ winner: 2, reason: "the second is simpler" }, req);
      const k = name.slice("candidate-".length);
      return hasToolResult(req) ? text(`candidate ${k} done`) : writeFile("fix.txt", `candidate ${k}`);
    }
    case "ca":
      return name === "classify" ? json({ category: "research", confidence: 0.9, rationale: "a question about facts" }, req) : text("researched it");
    case "gf":
      if (name === "filter") return json({ shortlist: ["candidate-2.md"], discarded: [{ path: "candidate-1.md", reason: "weaker" }] }, req);
      if (name === "judge") return json({ shortlist: ["candidate-1.md"], rationale: "1 is fresher than the filter thought" }, req);
      return text(`idea ${name.slice("candidate-".length)}`);
    case "goal":
      if (name.startsWith("orchestrator")) return hasToolResult(req) ? text("turn 1: wrote feature.txt (R1)") : writeFile("feature.txt", "the feature");
      return json({ verdict: "complete", summary: "done", findings: [] }, req);
    case "ralph":
      if (name.startsWith("refine")) return json({ question: "where is the parser" }, req);
      if (name.startsWith("research")) return text("notes: the parser is in parser.txt");
      if (name.startsWith("implement")) return hasToolResult(req) ? text("implemented v1") : writeFile("parser.txt", "parser v1");
      return json({ approved: true, findings: [] }, req);
    case "design":
      if (name === "discover") {
        if (conversation.includes("The person answered your question")) return json({ output_type: "web page", additions: "ok", references: [] }, req);
        if (conversation.includes("waits for a person")) return text("waiting for the person");
        return toolCall("ask_user", { question: "What should this design produce?", choices: ["web page", "app screen"] });
      }
      if (name === "design-system") return json({ found: false, paths: [], summary: "no design system here" }, req);
      if (name === "analysis") return text("audience: developers");
      if (name === "patterns") return text("a three-column pricing table");
      if (name === "generate-01") return text(PAGE);
      if (name === "export") return text(PAGE.replace("Pricing", "Spec"));
  }
  return { status: 500, body: `unexpected stage ${stage}` };
};

let s: Scripted;
beforeAll(async () => {
  s = await scriptedServer(stageOf, answers);
});

/** The request counts of one builtin's stages (its prefix dropped). */
const countsOf = (builtin: string) =>
  Object.fromEntries([...s.counts].filter(([k]) => k.startsWith(`${builtin}:`)).map(([k, n]) => [k.slice(builtin.length + 1), n]));

/** The model pi asks the provider for: MODEL without its provider's name. */
const PI_MODEL = MODEL.slice(MODEL.indexOf("/") + 1);

/** The model each of a builtin's stages asked for (its prefix dropped): PI_MODEL on pi, "fake-model" on the openai runner. */
const modelsOf = (builtin: string) =>
  Object.fromEntries(s.server.requests.map((q) => [stageOf(promptOf(q)), q.body.model] as const).filter(([k]) => k.startsWith(`${builtin}:`)).map(([k, m]) => [k.slice(builtin.length + 1), m]));

/** The inputs putting a builtin's role on atomic's openai runner (the role's runner and model inputs). */
const onOpenai = (...roles: string[]) => roles.flatMap((role) => [`${role}_runner=openai`, `${role}_model=fake-model`]);

/** A pi home (its own fake-provider config) and the run's environment; `extra` (a git repository's) joins it. */
function piRun(extra: Record<string, string> = {}) {
  const pi = chatAgentSetup("pi", s.server.url);
  return { ...pi, env: { ...s.env, ...extra, ...pi.env, PATH: withAgentNode(extra.PATH ?? process.env.PATH!) } };
}

async function run(name: string, inputs: string[], p: { home: string; cwd: string; env: Record<string, string> }): Promise<Finished> {
  const r = await runAtomic(["--json", "run", name, ...[...inputs, "runner=pi", `model=${MODEL}`].flatMap((i) => ["--input", i]), "--workers", "1"], { ...p, timeoutMs: 170_000 });
  const last = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { runId: string; status: string; outputs: Record<string, unknown> };
  return { code: r.code, runId: last.runId, status: last.status, outputs: last.outputs ?? {}, stdout: r.stdout, stderr: r.stderr };
}

const LIMIT = 180_000;

heavyTest("adversarial-verification on pi: one round, two verifiers (on the openai runner: verifier_runner), a quorum of 0.5 reached despite one veto", async () => {
  const p = piRun();
  const r = await run("adversarial-verification", ["task=write the guide", "criteria=accuracy", "verifier_count=2", "max_repairs=0", "quorum=0.5", ...onOpenai("verifier")], p);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(countsOf("av")).toEqual({ work: 1, "verify-01-accuracy-1": 1, "verify-01-accuracy-2": 1 });
  expect(modelsOf("av")).toEqual({ work: PI_MODEL, "verify-01-accuracy-1": "fake-model", "verify-01-accuracy-2": "fake-model" });
  const dir = `${p.cwd}/.atomic/runs/adversarial-verification-${r.runId}`;
  expect(r.outputs).toMatchObject({ approved: true, mean_score: 12, repairs: 0, approvals: 1, verifiers: 2, candidate: `${dir}/candidate.md` });
  const files = artifacts(dir);
  expect(files["candidate.md"]).toBe("the guide, draft one");
  expect(JSON.parse(files["round-01.json"]!)).toMatchObject({ round: 1, vetoes: 1, decision: "accepted" });
}, LIMIT);

heavyTest("best-of-n on pi: two candidates write fix.txt with pi's shell in their worktrees, the judge picks the second, merged", async () => {
  const repo = gitRepo();
  const head = repo.git("rev-parse", "HEAD");
  const p = { ...piRun(repo.env), cwd: repo.dir };
  const r = await run("best-of-n", ["prompt=write fix.txt", "n=2"], p);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(countsOf("bon")).toEqual({ "candidate-1": 2, "candidate-2": 2, judge: 1 });
  const out = r.outputs as { winner: string; into: string; candidates: string[]; reason: string };
  expect(out.winner).toBe(out.candidates[1]!);
  expect(out.reason).toBe("the second is simpler");
  expect(repo.git("show", `${out.into}:fix.txt`)).toBe("candidate 2");
  expect(repo.git("show", `${out.candidates[0]}:fix.txt`)).toBe("candidate 1");
  expect(repo.git("rev-parse", "HEAD")).toBe(head);
  expect(repo.git("status", "--porcelain", "--untracked-files=no")).toBe("");
}, LIMIT);

heavyTest("classify-and-act on pi: a confident classification (JSON text) acts at once with the research tools", async () => {
  const p = piRun();
  const r = await run("classify-and-act", ["prompt=why is the build slow"], p);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(countsOf("ca")).toEqual({ classify: 1, act: 1 });
  const dir = `${p.cwd}/.atomic/runs/classify-and-act-${r.runId}`;
  expect(r.outputs).toEqual({ category: "research", proposed: "research", selected_by: "classifier", result: "researched it", classification: `${dir}/classification.json`, action: `${dir}/action.md` });
  expect(artifacts(dir)["action.md"]).toBe("researched it");
}, LIMIT);

heavyTest("generate-and-filter on pi: two candidates, the filter's shortlist, the judge choosing from its evidence (filter and judge on the openai runner: judge_runner)", async () => {
  const p = piRun();
  const r = await run("generate-and-filter", ["prompt=name the tool", "num_candidates=2", "shortlist_size=1", ...onOpenai("judge")], p);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(countsOf("gf")).toEqual({ "candidate-1": 1, "candidate-2": 1, filter: 1, judge: 1 });
  expect(modelsOf("gf")).toEqual({ "candidate-1": PI_MODEL, "candidate-2": PI_MODEL, filter: "fake-model", judge: "fake-model" });
  const dir = `${p.cwd}/.atomic/runs/generate-and-filter-${r.runId}`;
  expect(r.outputs).toEqual({
    shortlist: [`${dir}/candidate-1.md`],
    discarded: [{ path: "candidate-2.md", reason: "not chosen by the judge" }],
    rationale: "1 is fresher than the filter thought",
    chosen_by: "judge",
    shortlist_file: `${dir}/shortlist.md`,
    dir,
  });
  expect(artifacts(dir)["shortlist.md"]).toBe("# Shortlist\n\n1 is fresher than the filter thought\n\n## 1. candidate-1.md\n\nidea 1\n");
  const judge = s.server.requests.find((q) => stageOf(promptOf(q)) === "gf:judge")!;
  expect(promptOf(judge)).toContain("- candidate-1.md: weaker");
}, LIMIT);

heavyTest("goal on pi: one turn writes feature.txt with pi's shell, three reviewers (on the openai runner: reviewer_runner) say complete, the branch pushed and gh opens the pull request", async () => {
  const repo = gitRepo();
  const p = { ...piRun(repo.env), cwd: repo.dir };
  const r = await run("goal", ["objective=Add the feature", "acceptance_criteria=the feature exists", "max_turns=1", "create_pr=true", ...onOpenai("reviewer")], p);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(countsOf("goal")).toEqual({ "orchestrator-01": 2, "review-01-completion": 1, "review-01-evidence": 1, "review-01-risk": 1 });
  expect(modelsOf("goal")).toEqual({ "orchestrator-01": PI_MODEL, "review-01-completion": "fake-model", "review-01-evidence": "fake-model", "review-01-risk": "fake-model" });
  const branch = `atomic/goal-${r.runId}`;
  expect(r.outputs).toMatchObject({ status: "complete", turns: 1, branch, blockers: [], pull_request: "https://github.example/acme/project/pull/7" });
  expect(repo.git("show", `${branch}:feature.txt`)).toBe("the feature");
  expect(repo.git("--git-dir", repo.origin, "rev-parse", branch)).toBe(repo.git("rev-parse", branch));
  const [call, ...more] = repo.ghCalls();
  expect(more).toEqual([]);
  expect(call!.slice(0, 6)).toEqual(["pr", "create", "--base", "main", "--head", branch]);
}, LIMIT);

heavyTest("ralph on pi: one loop (refine, research, implement with pi's shell, the QA check recorded, two approvals on the openai runner: reviewer_a_runner, reviewer_b_runner), notes and QA evidence committed, gh opens the pull request", async () => {
  const repo = gitRepo();
  const p = { ...piRun(repo.env), cwd: repo.dir };
  const r = await run("ralph", ["prompt=Accept trailing commas", "max_loops=1", "create_pr=true", "qa_command=echo qa-passed", "qa_dir=evidence", ...onOpenai("reviewer_a", "reviewer_b")], p);
  expect(r.stderr).toBe("");
  expect(r.code).toBe(0);
  expect(countsOf("ralph")).toEqual({ "refine-01": 1, "research-01": 1, "implement-01": 2, "review-01-a": 1, "review-01-b": 1 });
  expect(modelsOf("ralph")).toEqual({ "refine-01": PI_MODEL, "research-01": PI_MODEL, "implement-01": PI_MODEL, "review-01-a": "fake-model", "review-01-b": "fake-model" });
  const branch = `atomic/ralph-${r.runId}`;
  const out = r.outputs as { approved: boolean; loops: number; notes: string[]; pull_request: string; qa: { exit_code: number; cast: string; tail: string } };
  expect(out).toMatchObject({ approved: true, loops: 1, branch, pull_request: "https://github.example/acme/project/pull/7" });
  expect(repo.git("show", `${branch}:parser.txt`)).toBe("parser v1");
  // the research notes, committed in the repository with the loop's implementation
  const note = out.notes[0]!.slice(out.notes[0]!.lastIndexOf("/") + 1);
  expect(repo.git("show", `${branch}:specs/research/${note}`)).toContain("notes: the parser is in parser.txt");
  expect(out.qa.exit_code).toBe(0);
  expect(out.qa.tail).toContain("qa-passed");
  expect(existsSync(out.qa.cast)).toBe(true);
  const [call] = repo.ghCalls();
  expect(call!.slice(0, 6)).toEqual(["pr", "create", "--base", "main", "--head", branch]);
  // the QA evidence committed on the pushed branch under qa_dir, linked there from the pull request
  const cast = `evidence/${r.runId}/loop-01/terminal.cast`;
  expect(call!.join(" ")).toContain(`Terminal recording (asciicast v2; \`asciinema play\` replays it): [${cast}](../blob/${branch}/${cast})`);
  expect(repo.git("--git-dir", repo.origin, "show", `${branch}:${cast}`)).toContain("qa-passed");
}, LIMIT);

heavyTest("open-claude-design on pi: the interviewer asks through pi's ask_user (answered with atomic answer), three analyses (on the openai runner: analyst_runner), one round accepted, the spec under specs/design", async () => {
  const p = piRun();
  const asked: string[] = [];
  const d = await drive(
    ["run", "open-claude-design", ...["prompt=a pricing page", "runner=pi", `model=${MODEL}`, "chromium=/nonexistent/chrome", ...onOpenai("analyst")].flatMap((i) => ["--input", i])],
    { ...s, env: p.env },
    p.home,
    p.cwd,
    (q) => {
      asked.push(q.question);
      return q.question.startsWith("Review the design") ? "accept" : "web page";
    },
    undefined,
    1,
  );
  expect(d.stderr).toBe("");
  expect(d.code).toBe(0);
  expect(asked.map((q) => q.slice(0, 33))).toEqual(["What should this design produce?", "Review the design (round 1): no s"]);
  // the interviewer: its question, its wait, its answer after pi's session resumed
  expect(countsOf("design")).toEqual({ discover: 3, "design-system": 1, analysis: 1, patterns: 1, "generate-01": 1, export: 1 });
  expect(modelsOf("design")).toEqual({ discover: PI_MODEL, "design-system": "fake-model", analysis: "fake-model", patterns: "fake-model", "generate-01": PI_MODEL, export: PI_MODEL });
  const dir = `${p.cwd}/.atomic/runs/open-claude-design-${d.runId}`;
  const specs = `${p.cwd}/specs/design/${d.runId}`;
  expect(d.outputs).toMatchObject({ decision: "accepted", rounds: 1, preview: `${dir}/preview.html`, spec: `${dir}/spec.html`, specs, screenshot: null });
  expect(JSON.parse(artifacts(dir)["brief.json"]!)).toMatchObject({ interviewed_by: "discover", output_type: "web page" });
  const inRepo = artifacts(specs);
  expect(inRepo["preview.html"]).toContain("<h1>Pricing</h1>");
  expect(inRepo["spec.html"]).toContain("<h1>Spec</h1>");
  expect(inRepo["design-context.md"]).toContain("a three-column pricing table");
}, LIMIT);

/**
 * ralph through dist/atomic against the scripted fake OpenAI server, in a
 * real git repository (a local bare origin, a fake glab on PATH): loop 1's
 * refined question is re-asked once (invalid), its research is kept as a
 * dated note (output: "file"), the implementation is committed, reviewer B
 * (its own model) does not approve, so the consolidated findings and the
 * new notes are attached to loop 2's implementation (reads); both approve
 * in loop 2: the branch is pushed and glab opens a merge request; every
 * research and implement stage worked in one worktree of the run's branch. Every artifact is checked file by file. One loop
 * without approval fails with the findings and still opens the merge
 * request, titled "[needs a person]", the reviewers' objections in its body. SIGKILLed at a random stage
 * and resumed: no recorded stage re-runs, outputs and files unchanged.
 * Loop 1's implementation works through bash, sandboxed by default (the
 * agent stages' default, which ralph keeps): in the worktree, it cannot
 * read the planted ~/.ssh key nor write outside the worktree.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { text, toolCall, type RecordedRequest, type Reply } from "../helpers/fake-openai.ts";
import { runAtomic } from "../helpers/atomic.ts";
import { makeTempDir } from "../helpers/temp.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { artifacts, killAtStageAndResume, normalized, pick, runBuiltin, scriptedServer } from "./support.ts";
import { expectNothingRecordedReran, gitRepo, inRepo } from "./git-support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const pad = (n: string) => n.padStart(2, "0");
const lastUser = (req: RecordedRequest) => req.body.messages.filter((m) => m.role === "user").at(-1)?.content ?? "";
const stageOf = (_first: string, req: RecordedRequest) => {
  const p = lastUser(req);
  const patterns: [RegExp, (m: RegExpExecArray) => string][] = [
    [/^You refine the research question for loop (\d+)/, (m) => `refine-${pad(m[1]!)}`],
    [/^You research loop (\d+)/, (m) => `research-${pad(m[1]!)}`],
    [/^You are the orchestrator of loop (\d+)/, (m) => `implement-${pad(m[1]!)}`],
    [/^You are reviewer ([AB]) of loop (\d+)/, (m) => `review-${pad(m[2]!)}-${m[1]!.toLowerCase()}`],
    [/^You consolidate the two reviewers' findings on loop (\d+)/, (m) => `consolidate-${pad(m[1]!)}`],
  ];
  for (const [re, name] of patterns) {
    const m = re.exec(p);
    if (m) return name(m);
  }
  return `unknown: ${p.slice(0, 40)}`;
};

/** Loop 1's implementation through bash, which also tries the user's key and a write outside its worktree: ralph's agent stages run in the sandbox by default. */
const ESCAPE = `/var/tmp/atomic-ralph-escape-${process.pid}`;
const KEY = "-----BEGIN OPENSSH PRIVATE KEY----- ralph-test-key";
const IMPLEMENT_1_BASH = `printf 'parser v1\\n' > parser.txt && echo "PWD=$(pwd)" && { cat ~/.ssh/id_ed25519 2>/dev/null && echo SSH=read || echo SSH=denied; } && { echo x > ${ESCAPE} 2>/dev/null && echo SYSTEM=written || echo SYSTEM=denied; }`;
afterAll(() => rmSync(ESCAPE, { force: true }));

const answers = (stage: string, n: number): Reply => {
  const [kind, loop, who] = stage.split("-");
  const i = Number(loop);
  if (kind === "refine") return i === 1 && n === 0 ? toolCall("structured_output", { question: 7 }) : toolCall("structured_output", { question: `question ${i}` });
  if (kind === "research") return text(`notes of loop ${i}`);
  if (kind === "implement" && i === 1 && n === 0) return toolCall("bash", { command: IMPLEMENT_1_BASH });
  if (kind === "implement") return n === 0 ? toolCall("write", { path: "parser.txt", content: `parser v${i}\n` }) : text(`implemented v${i}`);
  if (kind === "review") return toolCall("structured_output", i === 1 && who === "b" ? { approved: false, findings: ["trailing commas still fail"] } : { approved: true, findings: [] });
  if (kind === "consolidate") return text("- trailing commas still fail");
  return { status: 500, body: `unexpected stage ${stage}` };
};

const INPUTS = ["prompt=Accept trailing commas", "acceptance_criteria=the parser tests pass", "model=fake-model", "reviewer_b_model=other-model", "create_pr=true"];
const COUNTS = {
  "refine-01": 2, "research-01": 1, "implement-01": 2, "review-01-a": 1, "review-01-b": 1, "consolidate-01": 1,
  "refine-02": 1, "research-02": 1, "implement-02": 2, "review-02-a": 1, "review-02-b": 1,
};

e2eTest(
  "ralph: research, implement, two reviewers; findings consolidated into the next loop; both approve: a merge request through glab; one loop without approval fails; SIGKILL and resume re-run nothing recorded",
  async () => {
    const s = await scriptedServer(stageOf, answers);
    try {
      const repo = gitRepo("glab");
      // A key in the user's home, which a sandboxed stage must not read.
      mkdirSync(join(repo.env.HOME!, ".ssh"), { recursive: true });
      writeFileSync(join(repo.env.HOME!, ".ssh", "id_ed25519"), `${KEY}\n`, { mode: 0o600 });
      const r = await inRepo(s, repo, (home) => runBuiltin("ralph", INPUTS, s, home, repo.dir));
      expect(r.code).toBe(0);
      expect(Object.fromEntries(s.counts)).toEqual(COUNTS);
      const dir = `${repo.dir}/.atomic/runs/ralph-${r.runId}`;
      const branch = `atomic/ralph-${r.runId}`;
      const commits = repo.git("log", "--format=%H %s", `main..${branch}`).split("\n");
      // each loop's implementation (its notes with it) committed by atomic when the implement stage ended
      expect(commits.map((c) => c.slice(41))).toEqual(["atomic: what stage implement-02 left uncommitted", "atomic: what stage implement-01 left uncommitted"]);
      expect(repo.git("show", `${branch}:parser.txt`)).toBe("parser v2");
      const date = new Date().toISOString().slice(0, 10);
      const notes = [`${dir}/research/01-${date}.md`, `${dir}/research/02-${date}.md`];
      expect(r.outputs).toEqual({
        approved: true,
        loops: 2,
        branch,
        commits: commits.map((c) => c.slice(0, 40)).reverse(),
        notes,
        findings: "",
        pull_request: "https://github.example/acme/project/pull/7",
        qa: null,
        ledger: `${dir}/ralph-ledger.json`,
        dir,
      });
      // one worktree for every research and implement stage, the first one's, in the git directory (gc removes it)
      const listed = repo.git("worktree", "list", "--porcelain").split("\n").filter((l) => l.startsWith("worktree ") || l.startsWith("branch "));
      expect(listed).toHaveLength(4);
      expect(listed[2]).toMatch(new RegExp(`^worktree ${repo.dir}/\\.git/atomic-worktrees/${r.runId}/[0-9.]+-research-01$`));
      expect(listed[3]).toBe(`branch refs/heads/${branch}`);
      expect(repo.git("status", "--porcelain", "--untracked-files=no")).toBe("");
      expect(repo.git("--git-dir", repo.origin, "rev-parse", branch)).toBe(commits[0]!.slice(0, 40));
      // loop 1's implementation ran its bash in the worktree, sandboxed by default: no key, no write outside it
      const implement1 = s.server.requests.filter((q) => stageOf("", q) === "implement-01")[1]!;
      const bashResult = String(implement1.body.messages.find((m) => m.role === "tool")!.content);
      expect(bashResult).toContain(`PWD=${listed[2]!.slice("worktree ".length)}`);
      expect(bashResult).toContain("SSH=denied");
      expect(bashResult).toContain("SYSTEM=denied");
      expect(bashResult).not.toContain(KEY);
      expect(existsSync(ESCAPE)).toBe(false);
      // each loop's research notes are committed in the repository, under specs/research/
      const noteNames = (r.outputs.notes as string[]).map((n) => n.slice(n.lastIndexOf("/") + 1));
      const runFiles = artifacts(`${repo.dir}/.atomic/runs/ralph-${r.runId}`);
      expect(noteNames).toHaveLength(2);
      for (const [k, name] of noteNames.entries()) {
        expect(repo.git("show", `${branch}:specs/research/${name}`)).toBe(runFiles[`research/${name}`]!.trimEnd());
        // in loop k+1's own commit (commits are newest first)
        expect(repo.git("show", "--name-only", "--format=", commits[commits.length - 1 - k]!.slice(0, 40)).split("\n")).toContain(`specs/research/${name}`);
      }
      const [call, ...more] = repo.ghCalls();
      expect(more).toEqual([]);
      expect(call!.slice(0, 8)).toEqual(["mr", "create", "--source-branch", branch, "--target-branch", "main", "--title", "ralph: Accept trailing commas"]);
      expect(call!.slice(8, 9)).toEqual(["--description"]);
      expect(call!.at(-1)).toBe("--yes");

      // the reviewers are independent, each with its own model
      const model = (stage: string) => s.server.requests.find((q) => stageOf("", q) === stage)!.body.model;
      expect([model("review-01-a"), model("review-01-b"), model("implement-01")]).toEqual(["fake-model", "other-model", "fake-model"]);
      // loop 2's implementation was given its notes and loop 1's consolidated findings as attached files
      const implement2 = lastUser(s.server.requests.find((q) => stageOf("", q) === "implement-02")!);
      expect(implement2).toContain(`Attached files (2): ${notes[1]}, ${dir}/findings-01.md`);
      expect(implement2).toContain(`<file path="${dir}/findings-01.md">\n- trailing commas still fail\n</file>`);
      expect(implement2).toContain("Question: question 2\n\nnotes of loop 2");

      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual([
        "findings-01.md", "implementation-01.md", "implementation-02.md", "ralph-ledger.json",
        `research/01-${date}.md`, `research/02-${date}.md`, "reviews-01.json", "reviews-02.json",
      ]);
      expect(files[`research/01-${date}.md`]).toBe(`# Research, loop 1 (${date})\n\nQuestion: question 1\n\nnotes of loop 1`);
      expect(files["implementation-01.md"]).toBe("implemented v1");
      expect(files["findings-01.md"]).toBe("- trailing commas still fail");
      expect(JSON.parse(files["reviews-01.json"]!)).toEqual([
        { reviewer: "a", approved: true, findings: [], valid: true },
        { reviewer: "b", approved: false, findings: ["trailing commas still fail"], valid: true },
      ]);
      const ledger = JSON.parse(files["ralph-ledger.json"]!);
      expect(ledger).toMatchObject({ task: "Accept trailing commas", acceptance_criteria: "the parser tests pass", branch, base: "main", approved: true, pull_request: "https://github.example/acme/project/pull/7" });
      expect(ledger.loops.map((l: { loop: number; question: string; approved: boolean; findings: string | null; commit: string }) => [l.loop, l.question, l.approved, l.findings, l.commit])).toEqual([
        [1, "question 1", false, "findings-01.md", commits[1]!.slice(0, 40)],
        [2, "question 2", true, null, commits[0]!.slice(0, 40)],
      ]);

      // one loop, not approved: failed with the findings, no merge request
      s.counts.clear();
      const one = gitRepo("glab");
      one.git("branch", "release");
      const f = await inRepo(s, one, (home) => runBuiltin("ralph", [...INPUTS, "max_loops=1", "base_branch=release"], s, home, one.dir));
      expect(f.code).toBe(1);
      // the branch from the base asked for
      expect(one.git("log", "--format=%s", `release..atomic/ralph-${f.runId}`)).toBe("atomic: what stage implement-01 left uncommitted");
      const oneLedger = JSON.parse(artifacts(`${one.dir}/.atomic/runs/ralph-${f.runId}`)["ralph-ledger.json"]!);
      expect(oneLedger.base).toBe("release");
      expect(oneLedger.worktree).toMatch(new RegExp(`^${one.dir}/\\.git/atomic-worktrees/${f.runId}/[0-9.]+-research-01$`));
      expect(f.status).toBe("failed");
      // not approved: the pull request is opened all the same, marked as needing a person, with the objections as evidence
      expect(f.outputs).toMatchObject({ approved: false, loops: 1, findings: "- trailing commas still fail", pull_request: "https://github.example/acme/project/pull/7" });
      const [escalation, ...others] = one.ghCalls();
      expect(others).toEqual([]);
      expect(escalation!.slice(0, 8)).toEqual(["mr", "create", "--source-branch", `atomic/ralph-${f.runId}`, "--target-branch", "release", "--title", "[needs a person] ralph: Accept trailing commas"]);
      const body = escalation![9]!;
      expect(body).toContain(`**Needs a person:** the reviewers did not approve after 1 loop(s) of atomic run ${f.runId} (max_loops 1)`);
      expect(body).toContain("## Escalation evidence: the reviewers' objections (loop 1)\n\n### Reviewer B\n\n- trailing commas still fail");
      expect(body).not.toContain("### Reviewer A");
      expect(body).toContain("## Consolidated findings\n\n- trailing commas still fail");
      expect(one.git("--git-dir", one.origin, "rev-parse", `atomic/ralph-${f.runId}`)).toBe(one.git("rev-parse", `atomic/ralph-${f.runId}`));

      // a base branch that does not exist: one sentence, nothing asked of the model
      const before = s.server.requests.length;
      const nobase = await runAtomic(["run", "ralph", "--input", "prompt=x", "--input", "base_branch=nope", "--input", "model=fake-model"], { home: makeTempDir("atomic-ralph-home-"), cwd: one.dir, env: s.env });
      expect(nobase.code).toBe(1);
      expect(nobase.stderr).toContain(`ralph: there is no branch or commit named nope in ${one.dir}, and its work goes on a git branch of its own\n`);
      expect(s.server.requests.length).toBe(before);

      const order = Object.keys(COUNTS);
      const at = pick("ralph", order);
      s.counts.clear();
      const killRepo = gitRepo("glab");
      const resumed = await inRepo(s, killRepo, (home) => killAtStageAndResume("ralph", INPUTS, s, at, home, killRepo.dir));
      expect(resumed.code).toBe(0);
      await expectNothingRecordedReran(resumed, killRepo.dir, s, COUNTS, at);
      expect(normalized(resumed.outputs, resumed.runId, killRepo.dir)).toEqual(normalized(r.outputs, r.runId, repo.dir));
      expect(normalized(artifacts(`${killRepo.dir}/.atomic/runs/ralph-${resumed.runId}`), resumed.runId, killRepo.dir)).toEqual(normalized(files, r.runId, repo.dir));
      expect(killRepo.ghCalls().length).toBe(1);
    } finally {
      await s.close();
    }
  },
  300_000,
);

/**
 * adversarial-verification through dist/atomic against the scripted fake
 * OpenAI server: in round 1 one verifier's structured answer is out of
 * range (the runner re-asks it), one gets a provider error and one names
 * the wrong criterion (both re-asked by an `-again` stage), one vetoes; the
 * consolidate and repair stages rewrite the candidate; round 2 accepts.
 * Artifacts checked file by file; then SIGKILL at a random stage boundary
 * and resume re-runs no recorded stage and ends with the uninterrupted
 * run's outputs and files. Also: two indeterminate rounds in a row end the
 * run failed; a rejected answer with no repairs left ends failed with the
 * remaining work; a quorum of verifiers reached (accepted despite one
 * veto) and missed (failed, naming the approvals), and a quorum outside
 * (0, 1] refused in one sentence before anything runs.
 */

import { afterAll, afterEach, expect } from "bun:test";
import { runAtomic } from "../helpers/atomic.ts";
import { toolCall, text, type Reply } from "../helpers/fake-openai.ts";
import { cleanupNow, cleanupWhenIdle, e2eTest } from "../e2e/support.ts";
import { artifacts, homeAndCwd, killAtStageAndResume, normalized, pick, runBuiltin, scriptedServer, withoutRecorded } from "./support.ts";

afterEach(cleanupWhenIdle);
afterAll(cleanupNow);

const stageOf = (prompt: string) => {
  const m = /^You are verifier (\d+) for criterion ([a-z0-9-]+) \(round (\d+)\)(, asked again)?/.exec(prompt);
  if (m) return `verify-${m[3]!.padStart(2, "0")}-${m[2]}-${m[1]}${m[4] ? "-again" : ""}`;
  if (prompt.startsWith("You are the worker, repairing")) return "repair-01";
  if (prompt.startsWith("You are the worker")) return "work";
  if (prompt.startsWith("You are the consolidator")) return "consolidate-01";
  return `unknown: ${prompt.slice(0, 40)}`;
};

const verdict = (criterion_id: string, score: number, findings: { finding: string; severity: string }[] = []) =>
  toolCall("structured_output", { criterion_id, score, evidence: [`checked ${criterion_id}`], findings });

const answers = (stage: string, n: number): Reply => {
  if (stage === "work") return text("draft one");
  if (stage === "consolidate-01") return text("fix the evidence");
  if (stage === "repair-01") return text("draft two");
  const m = /^verify-(\d+)-(.+)-(\d)(-again)?$/.exec(stage);
  if (!m) return { status: 500, body: `unexpected stage ${stage}` };
  const [, round, criterion, k, again] = m;
  if (round === "01" && !again) {
    if (criterion === "task-fit" && k === "1" && n === 0) return verdict(criterion, 25);
    if (criterion === "evidence" && k === "2") return { status: 400, body: JSON.stringify({ error: { message: "verifier refused" } }) };
    if (criterion === "completeness" && k === "1") return verdict("task-fit", 12);
    if (criterion === "evidence" && k === "1") return verdict(criterion, 9, [{ finding: "no source for the numbers", severity: "veto" }]);
  }
  if (round === "01") return verdict(criterion!, 13, [{ finding: `${criterion} could be tighter`, severity: "note" }]);
  return verdict(criterion!, criterion === "evidence" ? 15 : 17, criterion === "completeness" ? [{ finding: "add an index", severity: "blocking" }] : []);
};

const INPUTS = ["task=write the guide", "model=fake-model", "verifier_count=2", "max_repairs=1"];
const FULL: Record<string, number> = {
  work: 1,
  "verify-01-task-fit-1": 2,
  "verify-01-task-fit-2": 1,
  "verify-01-evidence-1": 1,
  "verify-01-evidence-2": 1,
  "verify-01-completeness-1": 1,
  "verify-01-completeness-2": 1,
  "verify-01-evidence-2-again": 1,
  "verify-01-completeness-1-again": 1,
  "consolidate-01": 1,
  "repair-01": 1,
  "verify-02-task-fit-1": 1,
  "verify-02-task-fit-2": 1,
  "verify-02-evidence-1": 1,
  "verify-02-evidence-2": 1,
  "verify-02-completeness-1": 1,
  "verify-02-completeness-2": 1,
};

e2eTest(
  "invalid verdicts re-asked, a provider error, a veto repaired, round 2 accepted, files one by one; SIGKILL and resume re-run nothing recorded",
  async () => {
    const s = await scriptedServer(stageOf, answers);
    try {
      const { home, cwd } = homeAndCwd();
      const r = await runBuiltin("adversarial-verification", INPUTS, s, home, cwd);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(Object.fromEntries(s.counts)).toEqual(FULL);
      const dir = `${cwd}/.atomic/runs/adversarial-verification-${r.runId}`;
      expect(r.outputs).toEqual({
        approved: true,
        mean_score: 16.33,
        score_table: [
          { criterion_id: "task-fit", scores: [17, 17], mean: 17, vetoes: 0 },
          { criterion_id: "evidence", scores: [15, 15], mean: 15, vetoes: 0 },
          { criterion_id: "completeness", scores: [17, 17], mean: 17, vetoes: 0 },
        ],
        repairs: 1,
        approvals: 4,
        verifiers: 6,
        quorum_needed: null,
        remaining_work: ["completeness [blocking]: add an index", "completeness [blocking]: add an index"],
        candidate: `${dir}/candidate.md`,
        report: `${dir}/verification.md`,
        dir,
      });
      const files = artifacts(dir);
      expect(Object.keys(files)).toEqual(["candidate.md", "consolidation-01.md", "round-01.json", "round-02.json", "verification.md"]);
      expect(files["candidate.md"]).toBe("draft two");
      expect(files["consolidation-01.md"]).toBe("fix the evidence");
      const round1 = JSON.parse(files["round-01.json"]!);
      expect(round1).toMatchObject({ round: 1, repairs_before: 0, mean: 12.33, vetoes: 1, accept_mean: 14, decision: "repair" });
      expect(round1.verdicts.map((v: { stage: string; invalid: string | null; verdict: { score: number } | null }) => [v.stage, v.verdict?.score, v.invalid])).toEqual([
        ["verify-01-task-fit-1", 13, null],
        ["verify-01-task-fit-2", 13, null],
        ["verify-01-evidence-1", 9, null],
        ["verify-01-evidence-2-again", 13, null],
        ["verify-01-completeness-1-again", 13, null],
        ["verify-01-completeness-2", 13, null],
      ]);
      expect(JSON.parse(files["round-02.json"]!)).toMatchObject({ round: 2, repairs_before: 1, mean: 16.33, vetoes: 0, decision: "accepted" });
      expect(files["verification.md"]).toBe(
        "# Verification: approved\n\nMean score 16.33 (bar 14) after 1 repair(s).\n\n| criterion | scores | mean | vetoes |\n|---|---|---|---|\n" +
          "| task-fit | 17, 17 | 17 | 0 |\n| evidence | 15, 15 | 15 | 0 |\n| completeness | 17, 17 | 17 | 0 |\n\n" +
          "## Remaining work\n\n- completeness [blocking]: add an index\n- completeness [blocking]: add an index\n",
      );
      // the worker's repair saw the plan; the round-2 verifiers saw the repaired candidate
      const prompts = s.server.requests.map((q) => q.body.messages.find((m) => m.role === "user")!.content ?? "");
      expect(prompts.find((p) => p.startsWith("You are the worker, repairing"))).toContain("Repair plan:\nfix the evidence");
      expect(prompts.filter((p) => p.includes("(round 2)")).every((p) => p.endsWith("Candidate answer:\ndraft two"))).toBe(true);

      const at = pick("adversarial-verification", Object.keys(FULL));
      s.counts.clear();
      const k = homeAndCwd();
      const resumed = await killAtStageAndResume("adversarial-verification", INPUTS, s, at, k.home, k.cwd);
      expect(resumed.stderr).toBe("");
      expect(resumed.code).toBe(0);
      expect(resumed.recorded).not.toContain(at);
      expect(Object.fromEntries(s.counts)).toEqual(withoutRecorded(FULL, resumed.recorded));
      expect(normalized(resumed.outputs, resumed.runId, k.cwd)).toEqual(normalized(r.outputs, r.runId, cwd));
      expect(artifacts(`${k.cwd}/.atomic/runs/adversarial-verification-${resumed.runId}`)).toEqual(files);
    } finally {
      await s.close();
    }
  },
  240_000,
);

e2eTest("two indeterminate rounds in a row end the run failed; a rejection with no repair left ends failed with the remaining work", async () => {
  const wrong = await scriptedServer(stageOf, (stage) => (stage === "work" ? text("draft") : verdict("elsewhere", 20)));
  try {
    const { home, cwd } = homeAndCwd();
    const r = await runBuiltin("adversarial-verification", ["task=t", "model=fake-model", "verifier_count=1", "criteria=accuracy"], wrong, home, cwd);
    expect(r.code).toBe(1);
    expect(r.status).toBe("failed");
    expect(Object.fromEntries(wrong.counts)).toEqual({ work: 1, "verify-01-accuracy-1": 1, "verify-01-accuracy-1-again": 1, "verify-02-accuracy-1": 1, "verify-02-accuracy-1-again": 1 });
    const dir = `${cwd}/.atomic/runs/adversarial-verification-${r.runId}`;
    expect(r.outputs).toMatchObject({ approved: false, mean_score: 0, score_table: [], repairs: 0 });
    const files = artifacts(dir);
    expect(Object.keys(files)).toEqual(["candidate.md", "round-01.json", "round-02.json", "verification.md"]);
    expect(JSON.parse(files["round-02.json"]!)).toMatchObject({ decision: "indeterminate" });
    expect(files["verification.md"]).toContain("two rounds in a row had invalid verifier answers");
  } finally {
    await wrong.close();
  }
  const low = await scriptedServer(stageOf, (stage) =>
    stage === "work" ? text("draft") : verdict("accuracy", 10, [{ finding: "wrong date", severity: "blocking" }]),
  );
  try {
    const { home, cwd } = homeAndCwd();
    const r = await runBuiltin("adversarial-verification", ["task=t", "model=fake-model", "verifier_count=1", "criteria=accuracy", "max_repairs=0"], low, home, cwd);
    expect(r.code).toBe(1);
    expect(r.outputs).toMatchObject({ approved: false, mean_score: 10, repairs: 0, remaining_work: ["accuracy [blocking]: wrong date"] });
    expect(Object.fromEntries(low.counts)).toEqual({ work: 1, "verify-01-accuracy-1": 1 });
  } finally {
    await low.close();
  }
});

e2eTest("a token budget used up: no stage starts after it, the run ends blocked; resume with a larger budget finishes without redoing the work stage", async () => {
  const s = await scriptedServer(stageOf, answers);
  try {
    const { home, cwd } = homeAndCwd();
    const r = await runAtomic(["--json", "run", "adversarial-verification", ...INPUTS.flatMap((i) => ["--input", i]), "--max-tokens", "20"], { home, cwd, env: s.env });
    expect(r.code).toBe(3);
    const last = JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { runId: string; status: string; error: { message: string } };
    expect(last.status).toBe("blocked");
    expect(last.error.message).toContain("the token budget of 20 is used up");
    expect(s.counts.get("consolidate-01")).toBeUndefined();
    s.counts.clear();
    const resumed = await runAtomic(["--json", "resume", last.runId, "--max-tokens", "100000"], { home, cwd, env: s.env });
    expect(resumed.code).toBe(0);
    expect(s.counts.get("work")).toBeUndefined();
    expect(JSON.parse(resumed.stdout.trim().split("\n").at(-1)!).outputs).toMatchObject({ approved: true, mean_score: 16.33, repairs: 1 });
  } finally {
    await s.close();
  }
});

e2eTest("quorum: 2 of 3 verifiers approving reach 0.66 despite a veto; 0.9 needs all 3 and is missed; a quorum outside (0, 1] is refused in one sentence", async () => {
  // verifiers 1 and 2 approve (18, no finding); verifier 3 vetoes
  const s = await scriptedServer(stageOf, (stage) => {
    if (stage === "work") return text("draft");
    return stage.endsWith("-3") ? verdict("accuracy", 6, [{ finding: "the date is wrong", severity: "veto" }]) : verdict("accuracy", 18);
  });
  try {
    const base = ["task=t", "model=fake-model", "verifier_count=3", "criteria=accuracy", "max_repairs=0"];
    const reached = homeAndCwd();
    const r = await runBuiltin("adversarial-verification", [...base, "quorum=0.66"], s, reached.home, reached.cwd);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.outputs).toMatchObject({ approved: true, approvals: 2, verifiers: 3, quorum_needed: 2, mean_score: 14, repairs: 0 });
    const dir = `${reached.cwd}/.atomic/runs/adversarial-verification-${r.runId}`;
    expect(JSON.parse(artifacts(dir)["round-01.json"]!)).toMatchObject({ vetoes: 1, approvals: 2, quorum: 0.66, quorum_needed: 2, decision: "accepted" });
    expect(artifacts(dir)["verification.md"]).toContain("2 of 3 verifiers approved; the quorum needs 2.");

    s.counts.clear();
    const missed = homeAndCwd();
    const m = await runBuiltin("adversarial-verification", [...base, "quorum=0.9"], s, missed.home, missed.cwd);
    expect(m.code).toBe(1);
    expect(m.status).toBe("failed");
    expect(m.outputs).toMatchObject({ approved: false, approvals: 2, verifiers: 3, quorum_needed: 3, remaining_work: ["accuracy [veto]: the date is wrong"] });
    expect(Object.fromEntries(s.counts)).toEqual({ work: 1, "verify-01-accuracy-1": 1, "verify-01-accuracy-2": 1, "verify-01-accuracy-3": 1 });

    s.counts.clear();
    for (const q of ["0", "1.5", "-0.2"]) {
      const bad = homeAndCwd();
      const b = await runAtomic(["run", "adversarial-verification", ...base.flatMap((i) => ["--input", i]), "--input", `quorum=${q}`], { home: bad.home, cwd: bad.cwd, env: s.env });
      expect(b.code).toBe(2);
      expect(b.stderr).toBe(
        `error: input "quorum" is invalid: the quorum is a fraction of the verifiers above 0 and at most 1, such as 0.66.\nhint: list the workflow's inputs with: atomic workflows --inputs adversarial-verification\n`,
      );
    }
    expect(s.server.requests.length).toBe(8); // nothing ran for the refused quorums
  } finally {
    await s.close();
  }
});

/**
 * goal: pursue an objective over turns, on a git branch of its own, until
 * reviewers agree that the acceptance criteria are met. Each turn an
 * orchestrator stage works (turn 2 on continues the previous turn's agent
 * session: `continueFrom`) in the branch's worktree (`workspace`: the
 * first turn makes it, each later turn names the same branch and works on
 * in it), what it changed is committed on the branch when the turn ends,
 * and three reviewers judge the work in parallel: completion (are the
 * criteria met?), evidence (is each claim backed by files, tests, output?)
 * and risk (what could break?). Each returns a verdict and findings, each
 * finding with a severity, a confidence (0-1) and the requirements (R1, R2,
 * … one per line of acceptance_criteria) it traces to. Blocking findings
 * below 0.7 confidence are re-verified by one more stage, which confirms or
 * dismisses each; the confirmed and the confident ones are the turn's
 * blockers, handed to the orchestrator's next turn.
 *
 * How it ends (status in goal-ledger.json):
 * - complete: at least two of the three reviewers say "complete" and no
 *   blocker remains; with create_pr, a last stage pushes the branch to
 *   origin and opens a pull request with gh (or a merge request with glab);
 * - blocked: the same blocker (its text, case and punctuation aside) in
 *   three turns running;
 * - needs_human: max_turns turns without either.
 * The branch keeps every turn's commits; `atomic gc` removes the worktree.
 *
 *   atomic run goal --input objective="Add a --json flag to the CLI" \
 *     --input acceptance_criteria=$'--json prints one JSON object\nthe tests pass' --input max_turns=5
 *
 * Artifacts, under <cwd>/.atomic/runs/goal-<run id>/: goal-ledger.json
 * (written atomically after every turn: status, requirements, each turn's
 * receipt with its commit, reviews, re-verifications and blockers), and
 * turn-NN.md (the orchestrator's report of each turn).
 *
 * Durability: the artifact directory is fixed by a recorded step, the
 * branch by the run's id; every turn (its commit with it) is a stage, so a
 * resumed run continues the same ledger on the same branch and re-runs
 * nothing recorded.
 */
import { workflow, v, baseBranch, openPullRequest, writeFileAtomic, type WorkflowContext } from "atomic";

const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));
const LOW_CONFIDENCE = 0.7;
const BLOCKED_AFTER = 3;

const Finding = v.object({
  finding: v.pipe(v.string(), v.minLength(1)),
  severity: v.picklist(["blocking", "note"]),
  confidence: v.pipe(v.number(), v.minValue(0), v.maxValue(1)),
  requirements: v.array(v.string()),
});
type Finding = v.InferOutput<typeof Finding>;
const Review = v.object({ verdict: v.picklist(["complete", "incomplete"]), summary: v.string(), findings: v.array(Finding) });
const Recheck = v.object({ results: v.array(v.object({ index: v.pipe(v.number(), v.integer()), confirmed: v.boolean(), reason: v.string() })) });

const REVIEWERS = [
  { id: "completion", ask: "Are the acceptance criteria met, each of them? Say complete only if every requirement is." },
  { id: "evidence", ask: "Is every claim of the orchestrator's report backed by evidence in the files (code, tests, their output)?" },
  { id: "risk", ask: "What could this change break or leave unsafe? Only real risks are blocking." },
] as const;

interface Turn {
  turn: number;
  receipt: { report: string; file: string; commit: string };
  reviews: { reviewer: string; verdict: string; summary: string; findings: Finding[]; valid: boolean }[];
  reverified: { finding: string; confirmed: boolean; reason: string }[];
  blockers: string[];
}

export default workflow({
  name: "goal",
  description: "Pursue an objective in turns on a git branch until its reviewers find the acceptance criteria met",
  inputs: {
    objective: v.pipe(v.string(), v.minLength(1), v.description("what to achieve")),
    acceptance_criteria: v.pipe(v.string(), v.minLength(1), v.description("one requirement per line (R1, R2, …)")),
    max_turns: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(50), v.description("most orchestrator turns")), 10),
    base_branch: optionalText("branch the work starts from (default: the current one)"),
    create_pr: v.optional(v.pipe(v.boolean(), v.description("open a pull request when complete (gh or glab)")), false),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    reviewer_runner: optionalText("runner of the reviewers (default: runner)"),
    reviewer_model: optionalText("model of the reviewers (default: model)"),
  },
  outputs: v.object({
    status: v.picklist(["complete", "blocked", "needs_human"]),
    turns: v.number(),
    branch: v.string(),
    commits: v.array(v.string()),
    blockers: v.array(v.string()),
    pull_request: v.nullable(v.string()),
    ledger: v.pipe(v.string(), v.description("goal-ledger.json")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  stages: [
    { name: "orchestrator-NN", description: "turn NN: works toward the objective in the worktree and reports" },
    { name: "review-NN-<completion|evidence|risk>", description: "three reviewers of the turn, all at once" },
    { name: "verify-NN", description: "re-verifies the low-confidence blocking findings of turn NN" },
    { name: "pull-request", description: "pushes the branch and opens a pull request (create_pr)" },
  ],
  async run(ctx) {
    const { objective, max_turns } = ctx.inputs;
    const lead = { runner: ctx.inputs.runner, model: ctx.inputs.model };
    const reviewer = { runner: ctx.inputs.reviewer_runner ?? lead.runner, model: ctx.inputs.reviewer_model ?? lead.model };
    const requirements = ctx.inputs.acceptance_criteria.split("\n").map((l) => l.trim()).filter(Boolean).map((text, i) => ({ id: `R${i + 1}`, text }));
    const criteria = requirements.map((r) => `${r.id}: ${r.text}`).join("\n");
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/goal-${ctx.runId}`);
    const ledgerPath = `${dir}/goal-ledger.json`;
    // Every turn on the run's branch, in its worktree (the first turn makes both, from base_branch or the checkout's commit).
    const branch = `atomic/goal-${ctx.runId}`;
    const workspace = { worktree: { branch, ...(ctx.inputs.base_branch ? { base: ctx.inputs.base_branch } : {}) } };
    const base = await baseBranch(ctx, "goal", ctx.inputs.base_branch);
    const ledger = { objective, requirements, status: "active" as string, branch, base, worktree: null as string | null, turns: [] as Turn[], blockers: [] as string[], pull_request: null as string | null };
    const saveLedger = (step: string) => ctx.tool(step, { status: ledger.status, turns: ledger.turns.length }, () => writeFileAtomic(ledgerPath, JSON.stringify(ledger, null, 2) + "\n"));

    let previous: Awaited<ReturnType<typeof ctx.task>> | undefined;
    const streaks = new Map<string, number>();
    for (let t = 1; t <= max_turns && ledger.status === "active"; t++) {
      const nn = String(t).padStart(2, "0");
      const open = ledger.turns.at(-1);
      const orchestrator = await ctx.task(`orchestrator-${nn}`, {
        ...lead,
        cwd: process.cwd(),
        workspace,
        ...(previous ? { continueFrom: previous } : {}),
        prompt: previous
          ? `Turn ${t} of at most ${max_turns}. The reviewers' blockers on your last turn:\n${list(open?.blockers ?? [])}\n\n` +
            `Their other findings:\n${list(open?.reviews.flatMap((r) => r.findings.filter((f) => f.severity === "note").map((f) => f.finding)) ?? [])}\n\n` +
            `Work on them, then report what you changed and how it meets each requirement.`
          : `You are the orchestrator of a goal, turn 1 of at most ${max_turns}. Work in this directory (a git worktree; your changes are committed after each turn); ` +
            `three reviewers judge each turn.\n\nObjective:\n${objective}\n\nAcceptance criteria:\n${criteria}\n\n` +
            `End each turn with a report: what you changed, and how it meets each requirement (by id).`,
      });
      const ws = orchestrator.workspace!;
      const commit = ws.head;
      const here = orchestrator.cwd ?? ws.path;
      ledger.worktree = ws.path;
      const answers = (await ctx.parallel(
        REVIEWERS.map((r) => ({
          name: `review-${nn}-${r.id}`,
          ...reviewer,
          cwd: here,
          tools: ["read", "list", "grep"],
          schema: Review,
          failureMode: "return" as const,
          prompt:
            `You are the ${r.id} reviewer of turn ${t}. ${r.ask}\nRead the files here (commit ${commit}) and judge the orchestrator's report. ` +
            `Each finding: blocking or a note, your confidence (0-1), and the requirement ids it concerns.\n\n` +
            `Objective:\n${objective}\n\nAcceptance criteria:\n${criteria}\n\nThe orchestrator's report:\n${orchestrator.text}`,
        })),
        { failFast: false },
      )) as { status: string; structured?: unknown }[];
      const known = new Set(requirements.map((r) => r.id));
      const reviews = answers.map((a, i) => {
        const parsed = a.status === "completed" ? v.safeParse(Review, a.structured) : undefined;
        // An unusable review counts as "incomplete" with no findings: it neither blocks nor completes.
        const review = parsed?.success ? parsed.output : { verdict: "incomplete" as const, summary: "the reviewer gave no valid answer", findings: [] };
        const findings = review.findings.map((f) => ({ ...f, requirements: f.requirements.filter((id) => known.has(id)) }));
        return { reviewer: REVIEWERS[i]!.id, verdict: review.verdict, summary: review.summary, findings, valid: parsed?.success === true };
      });
      const blocking = reviews.flatMap((r) => r.findings.filter((f) => f.severity === "blocking"));
      const doubtful = blocking.filter((f) => f.confidence < LOW_CONFIDENCE);
      const reverified = doubtful.length ? await recheck(ctx, nn, t, { ...reviewer, cwd: here }, doubtful, criteria) : [];
      const dismissed = new Set(reverified.filter((r) => !r.confirmed).map((r) => r.finding));
      const blockers = [...new Set(blocking.filter((f) => !dismissed.has(f.finding)).map((f) => f.finding))];
      ledger.turns.push({ turn: t, receipt: { report: orchestrator.text, file: `turn-${nn}.md`, commit }, reviews, reverified, blockers });
      ledger.blockers = blockers;

      const keys = new Set(blockers.map(blockerKey));
      for (const key of [...streaks.keys()]) if (!keys.has(key)) streaks.delete(key);
      for (const key of keys) streaks.set(key, (streaks.get(key) ?? 0) + 1);
      if (reviews.filter((r) => r.verdict === "complete").length >= 2 && blockers.length === 0) ledger.status = "complete";
      else if ([...streaks.values()].some((n) => n >= BLOCKED_AFTER)) ledger.status = "blocked";
      else if (t === max_turns) ledger.status = "needs_human";
      await ctx.tool(`report-${nn}`, {}, () => Bun.write(`${dir}/turn-${nn}.md`, orchestrator.text));
      await saveLedger(`ledger-${nn}`);
      previous = orchestrator;
    }

    if (ledger.status === "complete" && ctx.inputs.create_pr) {
      const pr = await openPullRequest(ctx, "pull-request", {
        cwd: ledger.worktree!,
        branch,
        base,
        title: `goal: ${oneLine(objective)}`,
        body: `${objective}\n\nAcceptance criteria:\n${criteria}\n\nReached in ${ledger.turns.length} turn(s) by atomic run ${ctx.runId}; see ${ledgerPath}.`,
      });
      ledger.pull_request = pr.ok ? pr.url : null;
      if (!pr.ok) ctx.log(`no pull request: ${pr.error}`);
      await saveLedger("ledger-final");
    }
    const outputs = {
      status: ledger.status as "complete" | "blocked" | "needs_human",
      turns: ledger.turns.length,
      branch,
      commits: [...new Set(ledger.turns.map((t) => t.receipt.commit))],
      blockers: ledger.blockers,
      pull_request: ledger.pull_request,
      ledger: ledgerPath,
      dir,
    };
    if (ledger.status === "complete") return outputs;
    const why = ledger.status === "blocked" ? `the same blocker ${BLOCKED_AFTER} turns running` : `not complete after ${max_turns} turns`;
    return ctx.exit({ status: "failed", reason: `${ledger.status}: ${why}; blockers: ${ledger.blockers.join("; ") || "none"}`, outputs });
  },
});

/** One stage re-verifies the turn's low-confidence blocking findings; a finding it does not answer for stays blocking. */
async function recheck(ctx: WorkflowContext<any>, nn: string, t: number, who: object, doubtful: Finding[], criteria: string) {
  const r = await ctx.task(`verify-${nn}`, {
    ...who,
    tools: ["read", "list", "grep"],
    schema: Recheck,
    failureMode: "return",
    prompt:
      `You re-verify findings of turn ${t}: reviewers raised them as blocking but were not confident. Check each against the files here; ` +
      `confirm it only if it is real.\n\nAcceptance criteria:\n${criteria}\n\nFindings:\n${doubtful.map((f, i) => `${i}. ${f.finding} (confidence ${f.confidence})`).join("\n")}`,
  });
  const parsed = r.status === "completed" ? v.safeParse(Recheck, r.structured) : undefined;
  const results = parsed?.success ? parsed.output.results : [];
  return doubtful.map((f, i) => {
    const answer = results.find((x) => x.index === i);
    return { finding: f.finding, confirmed: answer?.confirmed ?? true, reason: answer?.reason ?? "not re-verified: kept" };
  });
}

/** The same blocker across turns: its words, without case, punctuation or spacing. */
function blockerKey(text: string): string {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, " ").trim();
}

function list(items: string[]): string {
  return items.length ? items.map((i) => `- ${i}`).join("\n") : "(none)";
}

function oneLine(text: string): string {
  const line = text.split("\n")[0]!.trim();
  return line.length > 60 ? `${line.slice(0, 57)}...` : line;
}

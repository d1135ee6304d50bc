/**
 * adversarial-verification: a worker answers the task; verifiers try to
 * find what is wrong with the answer, one per criterion of the rubric and
 * per count; the answer is repaired until the verifiers accept it.
 *
 *   atomic run adversarial-verification --input task="Write the migration guide for v2" --input verifier_count=2
 *
 * Each round every verifier answers {criterion_id, score 1-20, evidence[],
 * findings[{finding, severity: veto|blocking|note}]}. An answer that is not
 * that (the stage failed, the schema did not match after the runner's own
 * corrective re-prompts, or it names another criterion) is re-asked once,
 * by a stage of its own; still invalid, it makes the round indeterminate:
 * the same candidate is verified again, and two indeterminate rounds in a
 * row end the run failed. A valid round accepts when no finding is a veto
 * and the mean score is at least accept_mean; with `quorum` (a fraction in
 * (0, 1], e.g. 0.66) it accepts instead when at least that fraction of the
 * verifiers approve (a verifier approves when its score is at least
 * accept_mean and none of its findings is a veto or blocking: a veto is
 * then one verifier's disapproval, not the whole round's); otherwise a consolidate
 * stage merges the findings into a repair plan and a repair stage rewrites
 * the candidate, at most max_repairs times. Not accepted then: the run
 * ends failed, with the remaining work in its outputs.
 *
 * Artifacts, under <cwd>/.atomic/runs/adversarial-verification-<run id>/:
 * candidate.md (the current answer; rewritten by each repair),
 * round-NN.json (every verdict of the round, which were invalid and why,
 * the mean, the decision), consolidation-NN.md (each repair plan) and
 * verification.md (the final score table and the remaining work).
 */
import { workflow, v } from "atomic";

const count = (min: number, max: number, fallback: number, what: string) =>
  v.optional(v.pipe(v.number(), v.integer(), v.minValue(min), v.maxValue(max), v.description(what)), fallback);
const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const Verdict = v.object({
  criterion_id: v.string(),
  score: v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(20)),
  evidence: v.array(v.string()),
  findings: v.array(v.object({ finding: v.string(), severity: v.picklist(["veto", "blocking", "note"]) })),
});
type Verdict = v.InferOutput<typeof Verdict>;

interface Slot {
  name: string;
  criterion: { id: string; text: string };
  verifier: number;
}
interface Row {
  criterion_id: string;
  verifier: number;
  stage: string;
  verdict: Verdict | null;
  invalid: string | null;
}

const slug = (s: string) =>
  s
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "") || "criterion";
const mean = (xs: number[]) => (xs.length === 0 ? 0 : Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 100) / 100);

export default workflow({
  name: "adversarial-verification",
  description: "Answer a task, have verifiers attack the answer per criterion, repair it until they accept",
  inputs: {
    task: v.pipe(v.string(), v.minLength(1), v.description("the task the worker answers")),
    verifier_count: count(1, 5, 3, "verifiers per criterion in each round"),
    max_repairs: count(0, 5, 2, "most repair rounds"),
    criteria: v.optional(
      v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.minLength(1), v.maxLength(8), v.description('the rubric: one criterion per item, "name" or "name: what it asks"')),
      ["task fit: the answer does what the task asks", "evidence: its claims are backed by facts, sources or checks", "completeness: nothing the task needs is missing"],
    ),
    accept_mean: v.optional(v.pipe(v.number(), v.minValue(1), v.maxValue(20), v.description("lowest mean score (1-20) that accepts")), 14),
    quorum: v.optional(
      v.pipe(
        v.number(),
        v.check((q) => q > 0 && q <= 1, "the quorum is a fraction of the verifiers above 0 and at most 1, such as 0.66"),
        v.description("fraction of verifiers that must approve (score at least accept_mean, no veto or blocking finding); default: no veto and the mean at least accept_mean"),
      ),
    ),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    verifier_runner: optionalText("runner of the verify and consolidate stages (default: runner)"),
    verifier_model: optionalText("model of the verify and consolidate stages (default: model)"),
  },
  outputs: v.object({
    approved: v.boolean(),
    mean_score: v.pipe(v.number(), v.description("the last valid round's mean score (0 when none was valid)")),
    score_table: v.pipe(
      v.array(v.object({ criterion_id: v.string(), scores: v.array(v.number()), mean: v.number(), vetoes: v.number() })),
      v.description("the last valid round's scores per criterion"),
    ),
    repairs: v.number(),
    approvals: v.pipe(v.number(), v.description("verifiers of the last valid round that approved (score at least accept_mean, no veto or blocking finding)")),
    verifiers: v.pipe(v.number(), v.description("verifiers of the last valid round")),
    quorum_needed: v.pipe(v.nullable(v.number()), v.description("approvals the quorum needs (null without quorum)")),
    remaining_work: v.pipe(v.array(v.string()), v.description("the veto and blocking findings of the last valid round")),
    candidate: v.pipe(v.string(), v.description("candidate.md")),
    report: v.pipe(v.string(), v.description("verification.md")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  stages: [
    { name: "work", description: "the worker answers the task (candidate.md)" },
    { name: "verify-NN-<criterion>-K", description: "verifier K of a criterion attacks the candidate in round NN, all at once; -again when its answer was unusable" },
    { name: "consolidate-NN", description: "merges a rejected round's findings into a repair plan" },
    { name: "repair-NN", description: "the worker rewrites the candidate from the plan" },
  ],
  async run(ctx) {
    const { task, verifier_count, max_repairs, accept_mean, quorum } = ctx.inputs;
    // The approvals a quorum needs of n verifiers (0.66 of 3: 2); null without a quorum.
    const needed = (n: number) => (quorum === undefined ? null : Math.ceil(quorum * n - 1e-9));
    const accepts = (rows: Row[], roundMean: number, vetoes: number) => {
      const need = needed(rows.length);
      return need === null ? vetoes === 0 && roundMean >= accept_mean : approvalsOf(rows, accept_mean) >= need;
    };
    const worker = { runner: ctx.inputs.runner, model: ctx.inputs.model };
    const verifier = { runner: ctx.inputs.verifier_runner ?? worker.runner, model: ctx.inputs.verifier_model ?? worker.model };
    const criteria = ctx.inputs.criteria.map((text, i, all) => {
      const id = slug(text.split(":")[0]!);
      return { id: all.slice(0, i).some((t) => slug(t.split(":")[0]!) === id) ? `${id}-${i + 1}` : id, text };
    });
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/adversarial-verification-${ctx.runId}`);
    const candidatePath = `${dir}/candidate.md`;
    const reportPath = `${dir}/verification.md`;

    const work = await ctx.task("work", {
      ...worker,
      prompt: `You are the worker. Do the task and answer with the complete result; adversarial verifiers will check it afterwards.\n\nTask:\n${task}`,
    });
    let candidate = work.text;
    await ctx.tool("write-candidate", { version: 0 }, () => Bun.write(candidatePath, candidate));

    const verifyPrompt = (s: Slot, round: number, again?: string) =>
      `You are verifier ${s.verifier} for criterion ${s.criterion.id} (round ${round})` +
      (again ? `, asked again: your previous answer could not be used (${again}). ` : ". ") +
      `Look for what is wrong with the candidate answer, judged on this criterion only: ${s.criterion.text}. ` +
      `Answer with criterion_id "${s.criterion.id}", a score from 1 (fails it) to 20 (flawless), the evidence you checked, and your findings, ` +
      `each with a severity: veto (the answer must not be accepted), blocking (must be fixed) or note.\n\nTask:\n${task}\n\nCandidate answer:\n${candidate}`;
    const check = (s: Slot, r: { status: string; structured?: unknown; error?: { message: string } }): { verdict: Verdict | null; invalid: string | null } => {
      if (r.status !== "completed") return { verdict: null, invalid: r.error?.message ?? `the stage ${r.status}` };
      const parsed = v.safeParse(Verdict, r.structured);
      if (!parsed.success) return { verdict: null, invalid: `not a verdict: ${parsed.issues[0].message}` };
      if (parsed.output.criterion_id !== s.criterion.id) return { verdict: null, invalid: `criterion_id ${JSON.stringify(parsed.output.criterion_id)} is not ${JSON.stringify(s.criterion.id)}` };
      return { verdict: parsed.output, invalid: null };
    };
    const verifyAll = async (slots: Slot[], round: number, again?: Map<string, string>) =>
      (await ctx.parallel(
        slots.map((s) => ({
          name: again ? `${s.name}-again` : s.name,
          ...verifier,
          tools: ["read", "list", "grep"],
          schema: Verdict,
          failureMode: "return" as const,
          prompt: verifyPrompt(s, round, again?.get(s.name)),
        })),
        { failFast: false },
      )) as { status: string; structured?: unknown; error?: { message: string } }[];

    let repairs = 0;
    let indeterminate = 0;
    let last: { rows: Row[]; mean: number } | undefined;
    for (let round = 1; ; round++) {
      const nn = String(round).padStart(2, "0");
      const slots: Slot[] = criteria.flatMap((criterion) =>
        Array.from({ length: verifier_count }, (_, k) => ({ name: `verify-${nn}-${criterion.id}-${k + 1}`, criterion, verifier: k + 1 })),
      );
      const rows: Row[] = (await verifyAll(slots, round)).map((r, i) => ({ criterion_id: slots[i]!.criterion.id, verifier: slots[i]!.verifier, stage: slots[i]!.name, ...check(slots[i]!, r) }));
      const retry = slots.filter((_, i) => rows[i]!.invalid);
      if (retry.length > 0) {
        const reasons = new Map(retry.map((s) => [s.name, rows[slots.indexOf(s)]!.invalid!]));
        const again = await verifyAll(retry, round, reasons);
        retry.forEach((s, j) => {
          const i = slots.indexOf(s);
          const second = check(s, again[j]!);
          rows[i] = { ...rows[i]!, stage: `${s.name}-again`, verdict: second.verdict, invalid: second.invalid && `${rows[i]!.invalid}; asked again: ${second.invalid}` };
        });
      }
      const valid = rows.every((r) => r.verdict);
      const scores = rows.flatMap((r) => (r.verdict ? [r.verdict.score] : []));
      const roundMean = mean(scores);
      const vetoes = rows.flatMap((r) => r.verdict?.findings.filter((f) => f.severity === "veto") ?? []);
      const decision = !valid ? "indeterminate" : accepts(rows, roundMean, vetoes.length) ? "accepted" : repairs < max_repairs ? "repair" : "rejected";
      const approvals = approvalsOf(rows, accept_mean);
      await ctx.tool(`write-round-${nn}`, { round }, () =>
        Bun.write(`${dir}/round-${nn}.json`, JSON.stringify({ round, repairs_before: repairs, verdicts: rows, mean: roundMean, vetoes: vetoes.length, accept_mean, approvals, quorum: quorum ?? null, quorum_needed: needed(rows.length), decision }, null, 2) + "\n"),
      );
      if (!valid) {
        indeterminate++;
        if (indeterminate < 2) continue;
        await ctx.tool("write-report", { round }, () => Bun.write(reportPath, report(last, repairs, false, accept_mean, "two rounds in a row had invalid verifier answers")));
        return ctx.exit({
          status: "failed",
          reason: `rounds ${round - 1} and ${round} were indeterminate: verifiers gave invalid answers twice in a row`,
          outputs: outputs(last, repairs, false, candidatePath, reportPath, dir, accept_mean, needed),
        });
      }
      indeterminate = 0;
      last = { rows, mean: roundMean };
      if (decision === "accepted" || decision === "rejected") break;

      repairs++;
      const rr = String(repairs).padStart(2, "0");
      const findings = rows.flatMap((r) => r.verdict!.findings.map((f) => `- [${f.severity}] ${r.criterion_id} (verifier ${r.verifier}, score ${r.verdict!.score}): ${f.finding}`));
      const plan = await ctx.task(`consolidate-${rr}`, {
        ...verifier,
        tools: [],
        prompt:
          `You are the consolidator. Merge these verifier findings into one repair plan: drop duplicates, order by severity, say what to change. ` +
          `The mean score was ${roundMean} (the bar is ${accept_mean})${vetoes.length ? `, with ${vetoes.length} veto(es)` : ""}.\n\nTask:\n${task}\n\nFindings:\n${findings.join("\n")}`,
      });
      const repaired = await ctx.task(`repair-${rr}`, {
        ...worker,
        prompt: `You are the worker, repairing your answer. Follow the repair plan and answer with the complete corrected result.\n\nTask:\n${task}\n\nYour answer:\n${candidate}\n\nRepair plan:\n${plan.text}`,
      });
      candidate = repaired.text;
      await ctx.tool(`write-repair-${rr}`, { repair: repairs }, async () => {
        await Bun.write(`${dir}/consolidation-${rr}.md`, plan.text);
        await Bun.write(candidatePath, candidate);
      });
    }

    const approved = accepts(last!.rows, last!.mean, vetoOf(last));
    await ctx.tool("write-report", {}, () => Bun.write(reportPath, report(last, repairs, approved, accept_mean, undefined, needed)));
    const out = outputs(last, repairs, approved, candidatePath, reportPath, dir, accept_mean, needed);
    if (approved) return out;
    const need = needed(last!.rows.length);
    const why = need === null ? `mean ${last!.mean} (bar ${accept_mean}), ${vetoOf(last)} veto(es)` : `${out.approvals} of ${out.verifiers} verifiers approved, the quorum of ${quorum} needs ${need}`;
    return ctx.exit({ status: "failed", reason: `not accepted after ${repairs} repair(s): ${why}`, outputs: out });
  },
});

/** Verifiers that approve: a score at least the bar and no veto or blocking finding. */
function approvalsOf(rows: Row[], bar: number): number {
  return rows.filter((r) => r.verdict && r.verdict.score >= bar && !r.verdict.findings.some((f) => f.severity !== "note")).length;
}

function vetoOf(last: { rows: Row[] } | undefined): number {
  return (last?.rows ?? []).reduce((n, r) => n + (r.verdict?.findings.filter((f) => f.severity === "veto").length ?? 0), 0);
}

function scoreTable(last: { rows: Row[] } | undefined) {
  const ids = [...new Set((last?.rows ?? []).map((r) => r.criterion_id))];
  return ids.map((id) => {
    const rows = last!.rows.filter((r) => r.criterion_id === id && r.verdict);
    const scores = rows.map((r) => r.verdict!.score);
    return { criterion_id: id, scores, mean: mean(scores), vetoes: vetoOf({ rows }) };
  });
}

function remainingWork(last: { rows: Row[] } | undefined): string[] {
  return (last?.rows ?? []).flatMap((r) => (r.verdict?.findings ?? []).filter((f) => f.severity !== "note").map((f) => `${r.criterion_id} [${f.severity}]: ${f.finding}`));
}

function outputs(last: { rows: Row[]; mean: number } | undefined, repairs: number, approved: boolean, candidate: string, report: string, dir: string, bar: number, needed: (n: number) => number | null) {
  const rows = last?.rows ?? [];
  return {
    approved,
    mean_score: last?.mean ?? 0,
    score_table: scoreTable(last),
    repairs,
    approvals: approvalsOf(rows, bar),
    verifiers: rows.length,
    quorum_needed: last ? needed(rows.length) : null,
    remaining_work: remainingWork(last),
    candidate,
    report,
    dir,
  };
}

function report(last: { rows: Row[]; mean: number } | undefined, repairs: number, approved: boolean, bar: number, why?: string, needed?: (n: number) => number | null): string {
  const table = scoreTable(last)
    .map((t) => `| ${t.criterion_id} | ${t.scores.join(", ")} | ${t.mean} | ${t.vetoes} |`)
    .join("\n");
  const remaining = remainingWork(last);
  return (
    `# Verification: ${approved ? "approved" : "not approved"}\n\n` +
    (why ? `${why}.\n\n` : "") +
    `Mean score ${last?.mean ?? 0} (bar ${bar}) after ${repairs} repair(s).\n\n` +
    (last && needed?.(last.rows.length) != null ? `${approvalsOf(last.rows, bar)} of ${last.rows.length} verifiers approved; the quorum needs ${needed(last.rows.length)}.\n\n` : "") +
    `| criterion | scores | mean | vetoes |\n|---|---|---|---|\n${table}\n\n` +
    `## Remaining work\n\n${remaining.length ? remaining.map((r) => `- ${r}`).join("\n") : "None."}\n`
  );
}

/**
 * ralph: research, implement, review, in loops, on a git branch of its
 * own, until two independent reviewers both approve. The research and
 * implement stages run in the branch's worktree (`workspace`: the first
 * makes it, from base_branch or the checkout's commit; the others name the
 * same branch and work on in it). Each loop:
 * 1. refine: sharpen the research question for this loop (from the task,
 *    the criteria and what the reviewers found last loop);
 * 2. research: answer it from the files (read-only tools); the notes go to
 *    research/NN-<date>.md (the date fixed by a recorded step) and into the
 *    repository as <notes_dir>/NN-<date>.md (specs/research unless given),
 *    committed with the loop's implementation;
 * 3. implement: the orchestrator changes the code, given the research
 *    notes and the last loop's consolidated findings as attached files
 *    (`reads`); what it changed is committed on the branch when it ends;
 * 4. qa (with qa_command): the end-to-end check runs in the worktree in a
 *    terminal of its own (a recorded step, qa-NN): what it printed is kept
 *    as an asciicast v2 recording, qa-NN/terminal.cast (asciinema plays
 *    it), and the screenshots it saves in $ATOMIC_QA_DIR (qa-NN/, one PNG
 *    per step of the check, e.g. taken with playwright) are its step
 *    screenshots; the reviewers are told its exit code and last output, and
 *    a loop whose check fails is not approved;
 * 5. review: two reviewers in parallel, independently (each its own runner
 *    and model when reviewer_a_* / reviewer_b_* say so), each answering
 *    {approved, findings[]}; an invalid answer is re-asked by the runner,
 *    and one that stays invalid counts as not approved;
 * 6. approved only when both approve (and the check passed); otherwise a consolidate stage merges
 *    their findings into findings-NN.md, which the next loop works from.
 * Approved: with create_pr, the branch is pushed and a pull request opened
 * (gh, or glab). Not approved after max_loops: the run fails with the last
 * findings; with create_pr the pull request is opened all the same, its
 * title marked "[needs a person]" and its body the escalation evidence (each
 * reviewer's objections of the last loop and the consolidated findings).
 * Either pull request's body ends with the last loop's QA evidence: the
 * check's exit code, its terminal recording and its step screenshots. So
 * that a reviewer can open them, they are committed on the branch under
 * <qa_dir>/<run id>/loop-NN/ (specs/qa unless given) before it is pushed,
 * and linked as ../blob/<branch>/<path>, which resolves from the pull
 * request's page (GitHub /pull/N, GitLab /-/merge_requests/N) to the file
 * on the branch; the path is the link's text. If git refuses the commit,
 * the body says why and links the paths in the run's artifacts instead.
 * The branch keeps the commits; `atomic gc` removes the worktree.
 *
 *   atomic run ralph --input prompt="Make the parser accept trailing commas" \
 *     --input acceptance_criteria="the parser tests pass" --input max_loops=4
 *
 * Artifacts, under <cwd>/.atomic/runs/ralph-<run id>/: research/NN-<date>.md
 * (each loop's question and notes), implementation-NN.md (the
 * orchestrator's report), reviews-NN.json (both reviews), findings-NN.md
 * (consolidated, when not approved), qa-NN/ (terminal.cast and the
 * check's screenshots), ralph-ledger.json (every loop,
 * written atomically).
 */
import { workflow, v, baseBranch, commitFiles, openPullRequest, writeFileAtomic, recordTerminal, quoteShell } from "atomic";

const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));
const Question = v.object({ question: v.pipe(v.string(), v.minLength(1)) });
const Review = v.object({ approved: v.boolean(), findings: v.array(v.string()) });

interface Qa {
  command: string;
  exit_code: number;
  /** The asciicast v2 recording of its terminal. */
  cast: string;
  /** The PNGs it saved in $ATOMIC_QA_DIR, in name order. */
  screenshots: string[];
  /** Its last 4,000 characters of output, terminal escapes removed. */
  tail: string;
}

interface Loop {
  loop: number;
  question: string;
  notes: string;
  commit: string;
  reviews: { reviewer: string; approved: boolean; findings: string[]; valid: boolean }[];
  qa: Qa | null;
  approved: boolean;
  findings: string | null;
}

export default workflow({
  name: "ralph",
  description: "Research, implement and review in loops on a git branch until two reviewers approve",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("the task")),
    acceptance_criteria: v.optional(v.pipe(v.string(), v.description("what the reviewers check, one per line")), ""),
    max_loops: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(50), v.description("most research/implement/review loops")), 10),
    base_branch: optionalText("branch the work starts from (default: the current one)"),
    notes_dir: v.optional(v.pipe(v.string(), v.minLength(1), v.description("where each loop's research notes are committed in the repository (relative to its root)")), "specs/research"),
    qa_command: optionalText("the end-to-end check, a shell command run in the worktree after each implementation; its screenshots (PNGs saved in $ATOMIC_QA_DIR) and a terminal recording become the QA evidence"),
    qa_timeout: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(7200), v.description("seconds the end-to-end check may take")), 600),
    qa_dir: v.optional(v.pipe(v.string(), v.minLength(1), v.description("where the last loop's QA evidence is committed on the branch for the pull request (relative to the repository's root)")), "specs/qa"),
    create_pr: v.optional(v.pipe(v.boolean(), v.description("open a pull request when approved (gh or glab); not approved after max_loops, one marked as needing a person with the reviewers' objections")), false),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    reviewer_a_runner: optionalText("runner of the first reviewer (default: runner)"),
    reviewer_a_model: optionalText("model of the first reviewer (default: model)"),
    reviewer_b_runner: optionalText("runner of the second reviewer (default: runner)"),
    reviewer_b_model: optionalText("model of the second reviewer (default: model)"),
  },
  outputs: v.object({
    approved: v.boolean(),
    loops: v.number(),
    branch: v.string(),
    commits: v.array(v.string()),
    notes: v.pipe(v.array(v.string()), v.description("the research notes")),
    findings: v.pipe(v.string(), v.description("the last consolidated findings (empty when approved)")),
    pull_request: v.nullable(v.string()),
    qa: v.pipe(
      v.nullable(v.object({ command: v.string(), exit_code: v.number(), cast: v.string(), screenshots: v.array(v.string()), tail: v.string() })),
      v.description("the last loop's end-to-end check: exit code, terminal recording (asciicast v2), step screenshots (null without qa_command)"),
    ),
    ledger: v.pipe(v.string(), v.description("ralph-ledger.json")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  stages: [
    { name: "refine-NN", description: "loop NN refines the question" },
    { name: "research-NN", description: "researches it (research/NN-<date>.md)" },
    { name: "implement-NN", description: "implements in the worktree" },
    { name: "qa-NN", description: "runs the end-to-end check (qa_command), recording its terminal and keeping its screenshots" },
    { name: "review-NN-a, review-NN-b", description: "two reviewers, all at once" },
    { name: "consolidate-NN", description: "merges the findings of a loop not approved" },
    { name: "qa-evidence", description: "commits the last loop's QA evidence on the branch for the pull request (create_pr with qa_command)" },
    { name: "pull-request", description: "pushes the branch and opens a pull request (create_pr)" },
  ],
  async run(ctx) {
    const { prompt, max_loops } = ctx.inputs;
    const lead = { runner: ctx.inputs.runner, model: ctx.inputs.model };
    const reviewers = [
      { id: "a", runner: ctx.inputs.reviewer_a_runner ?? lead.runner, model: ctx.inputs.reviewer_a_model ?? lead.model },
      { id: "b", runner: ctx.inputs.reviewer_b_runner ?? lead.runner, model: ctx.inputs.reviewer_b_model ?? lead.model },
    ];
    const criteria = ctx.inputs.acceptance_criteria.trim() || "(none given: judge by the task)";
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/ralph-${ctx.runId}`);
    const ledgerPath = `${dir}/ralph-ledger.json`;
    // The research and implement stages on the run's branch, in its worktree (the first stage makes both).
    const branch = `atomic/ralph-${ctx.runId}`;
    const workspace = { worktree: { branch, ...(ctx.inputs.base_branch ? { base: ctx.inputs.base_branch } : {}) } };
    const base = await baseBranch(ctx, "ralph", ctx.inputs.base_branch);
    const ledger = { task: prompt, acceptance_criteria: criteria, branch, base, worktree: null as string | null, approved: false, loops: [] as Loop[], pull_request: null as string | null };
    /** The end-to-end check in the worktree's terminal, recorded (the recording's folder, qaDir, is made first); its screenshots are the PNGs it leaves in qaDir. */
    const endToEnd = (command: string, qaDir: string, nn: string) =>
      ctx.tool(`qa-${nn}`, { command }, async ({ signal }): Promise<Qa> => {
        const rec = await recordTerminal(`ATOMIC_QA_DIR=${quoteShell(qaDir)}; export ATOMIC_QA_DIR; ${command}`, {
          cwd: ledger.worktree!,
          castPath: `${qaDir}/terminal.cast`,
          title: `ralph ${ctx.runId}, loop ${Number(nn)}: ${command}`,
          timeoutMs: ctx.inputs.qa_timeout * 1000,
          signal,
        });
        const screenshots = [...new Bun.Glob("**/*.png").scanSync({ cwd: qaDir })].sort().map((n) => `${qaDir}/${n}`);
        return { command, exit_code: rec.exitCode, cast: rec.cast, screenshots, tail: Bun.stripANSI(rec.output).replaceAll("\r\n", "\n").slice(-4000) };
      });
    const save = (step: string) => ctx.tool(step, { loops: ledger.loops.length, approved: ledger.approved }, () => writeFileAtomic(ledgerPath, JSON.stringify(ledger, null, 2) + "\n"));

    let findings = "";
    let findingsFile: string | undefined;
    for (let i = 1; i <= max_loops && !ledger.approved; i++) {
      const nn = String(i).padStart(2, "0");
      const refined = await ctx.task(`refine-${nn}`, {
        ...lead,
        tools: [],
        schema: Question,
        failureMode: "return",
        prompt:
          `You refine the research question for loop ${i} of at most ${max_loops}: the one question whose answer most helps the next implementation step.\n\n` +
          `Task:\n${prompt}\n\nAcceptance criteria:\n${criteria}` +
          (findings ? `\n\nThe reviewers' findings on the last loop:\n${findings}` : ""),
      });
      const parsed = refined.status === "completed" ? v.safeParse(Question, refined.structured) : undefined;
      const question = parsed?.success ? parsed.output.question : prompt;
      const date = await ctx.tool(`date-${nn}`, {}, () => new Date().toISOString().slice(0, 10));
      const research = await ctx.task(`research-${nn}`, {
        ...lead,
        cwd: process.cwd(),
        workspace,
        tools: ["read", "list", "grep"],
        output: "file",
        prompt: `You research loop ${i}'s question from the files here; answer with notes the implementer can act on (facts, file paths, open points).\n\nQuestion:\n${question}\n\nTask:\n${prompt}`,
      });
      const worktree = research.cwd ?? research.workspace!.path;
      ledger.worktree = research.workspace!.path;
      const notes = `${dir}/research/${nn}-${date}.md`;
      await ctx.tool(`notes-${nn}`, { notes }, async () => {
        const text = `# Research, loop ${i} (${date})\n\nQuestion: ${question}\n\n${await Bun.file(research.outputPath).text()}`;
        await Bun.write(notes, text);
        // Also in the repository (committed with the loop's implementation).
        await Bun.write(`${ledger.worktree}/${ctx.inputs.notes_dir}/${nn}-${date}.md`, text);
        return notes;
      });
      const implemented = await ctx.task(`implement-${nn}`, {
        ...lead,
        cwd: process.cwd(),
        workspace,
        reads: findingsFile ? [notes, findingsFile] : [notes],
        prompt:
          `You are the orchestrator of loop ${i} of at most ${max_loops}: implement the task in this directory (a git worktree; your changes are committed after this loop), ` +
          `guided by the attached research notes${findingsFile ? " and the reviewers' findings on the last loop" : ""}. End with a report of what you changed.\n\n` +
          `Task:\n${prompt}\n\nAcceptance criteria:\n${criteria}`,
      });
      const commit = implemented.workspace!.head;
      const qa = ctx.inputs.qa_command ? await endToEnd(ctx.inputs.qa_command, `${dir}/qa-${nn}`, nn) : null;
      const answers = (await ctx.parallel(
        reviewers.map((r) => ({
          name: `review-${nn}-${r.id}`,
          runner: r.runner,
          model: r.model,
          cwd: worktree,
          tools: ["read", "list", "grep"],
          schema: Review,
          failureMode: "return" as const,
          prompt:
            `You are reviewer ${r.id.toUpperCase()} of loop ${i}, one of two who judge independently. Read the files here (commit ${commit}); approve only if the task is done ` +
            `and every criterion is met, else list what is missing or wrong.\n\nTask:\n${prompt}\n\nAcceptance criteria:\n${criteria}\n\nThe implementer's report:\n${implemented.text}` +
            (qa ? `\n\nThe end-to-end check (${qa.command}) exited ${qa.exit_code}${qa.screenshots.length ? ` and saved ${qa.screenshots.length} screenshot(s)` : ""}; its last output:\n${qa.tail}` : ""),
        })),
        { failFast: false },
      )) as { status: string; structured?: unknown }[];
      const reviews = answers.map((a, k) => {
        const p = a.status === "completed" ? v.safeParse(Review, a.structured) : undefined;
        const r = p?.success ? p.output : { approved: false, findings: ["the reviewer gave no valid answer"] };
        return { reviewer: reviewers[k]!.id, ...r, valid: p?.success === true };
      });
      const approved = reviews.every((r) => r.approved) && (qa === null || qa.exit_code === 0);
      const entry: Loop = { loop: i, question, notes, commit, reviews, qa, approved, findings: null };
      await ctx.tool(`write-loop-${nn}`, {}, async () => {
        await Bun.write(`${dir}/implementation-${nn}.md`, implemented.text);
        await Bun.write(`${dir}/reviews-${nn}.json`, JSON.stringify(reviews, null, 2) + "\n");
      });
      if (!approved) {
        const merged = await ctx.task(`consolidate-${nn}`, {
          ...lead,
          tools: [],
          prompt:
            `You consolidate the two reviewers' findings on loop ${i} into one deduplicated list of what the next loop must fix, most important first.\n\n` +
            reviews.map((r) => `Reviewer ${r.reviewer.toUpperCase()} (${r.approved ? "approved" : "not approved"}):\n${r.findings.map((f) => `- ${f}`).join("\n") || "(no findings)"}`).join("\n\n") +
            (qa && qa.exit_code !== 0 ? `\n\nThe end-to-end check (${qa.command}) failed with exit code ${qa.exit_code}; its last output:\n${qa.tail}` : ""),
        });
        findings = merged.text;
        findingsFile = `${dir}/findings-${nn}.md`;
        entry.findings = `findings-${nn}.md`;
        await ctx.tool(`findings-${nn}`, {}, () => Bun.write(findingsFile!, findings));
      } else {
        findings = "";
      }
      ledger.loops.push(entry);
      ledger.approved = approved;
      await save(`ledger-${nn}`);
    }

    if (ctx.inputs.create_pr) {
      const last = ledger.loops.at(-1);
      const objections = (last?.reviews ?? [])
        .filter((r) => !r.approved)
        .map((r) => `### Reviewer ${r.reviewer.toUpperCase()}\n\n${r.findings.map((f) => `- ${f}`).join("\n") || (r.valid ? "(no findings given)" : "(no valid review)")}`)
        .join("\n\n");
      let evidence = "";
      if (last?.qa) {
        const nn = String(last.loop).padStart(2, "0");
        const qaDir = `${dir}/qa-${nn}`;
        const committed = await commitFiles(ctx, "qa-evidence", {
          cwd: ledger.worktree!,
          files: [last.qa.cast, ...last.qa.screenshots],
          base: qaDir,
          into: `${ctx.inputs.qa_dir}/${ctx.runId}/loop-${nn}`,
          message: `atomic: QA evidence of ralph run ${ctx.runId}, loop ${last.loop}`,
        });
        if (!committed.ok) ctx.log(`ralph: the QA evidence could not be committed on ${branch} (${committed.error}); the pull request links its paths in the run's artifacts`);
        evidence = qaEvidence(last.loop, last.qa, committed.ok ? { branch, paths: committed.paths } : { error: committed.error });
      }
      const pr = await openPullRequest(
        ctx,
        "pull-request",
        ledger.approved
          ? { cwd: ledger.worktree!, branch, base, title: `ralph: ${oneLine(prompt)}`, body: `${prompt}\n\nApproved by both reviewers after ${ledger.loops.length} loop(s) of atomic run ${ctx.runId}; see ${ledgerPath}.${evidence}` }
          : {
              cwd: ledger.worktree!,
              branch,
              base,
              title: `[needs a person] ralph: ${oneLine(prompt)}`,
              body:
                `${prompt}\n\n**Needs a person:** the reviewers did not approve after ${ledger.loops.length} loop(s) of atomic run ${ctx.runId} (max_loops ${max_loops}); see ${ledgerPath}.\n\n` +
                `## Escalation evidence: the reviewers' objections (loop ${last?.loop ?? 0})\n\n${objections}\n\n## Consolidated findings\n\n${findings || "(none)"}\n${evidence}`,
            },
      );
      ledger.pull_request = pr.ok ? pr.url : null;
      if (!pr.ok) ctx.log(`no pull request: ${pr.error}`);
      await save("ledger-final");
    }
    const outputs = {
      approved: ledger.approved,
      loops: ledger.loops.length,
      branch,
      commits: [...new Set(ledger.loops.map((l) => l.commit))],
      notes: ledger.loops.map((l) => l.notes),
      findings,
      pull_request: ledger.pull_request,
      qa: ledger.loops.at(-1)?.qa ?? null,
      ledger: ledgerPath,
      dir,
    };
    if (ledger.approved) return outputs;
    return ctx.exit({ status: "failed", reason: `not approved after ${max_loops} loops; findings: ${oneLine(findings)}`, outputs });
  },
});

function oneLine(text: string): string {
  const line = text.split("\n")[0]!.trim();
  return line.length > 60 ? `${line.slice(0, 57)}...` : line;
}

/**
 * The pull request's QA evidence: the check's outcome, its terminal recording and its step screenshots. Committed on
 * the branch: each linked as ../blob/<branch>/<path> (from the pull request's page to the file on the branch, on
 * GitHub and GitLab alike), its repository path as the text. Not committed: linked by their paths in the run's artifacts.
 */
function qaEvidence(loop: number, qa: Qa, committed: { branch: string; paths: string[] } | { error: string }): string {
  const files = [qa.cast, ...qa.screenshots];
  const link = (path: string) => {
    if ("error" in committed) return `[${path.slice(path.lastIndexOf("/") + 1)}](${encodeURI(path)})`;
    const inRepo = committed.paths[files.indexOf(path)]!;
    return `[${inRepo}](${encodeURI(`../blob/${committed.branch}/${inRepo}`)})`;
  };
  const shots = qa.screenshots.length
    ? qa.screenshots.map((p, k) => `${k + 1}. ${link(p)}`).join("\n")
    : "(the check saved no screenshots in $ATOMIC_QA_DIR)";
  const where =
    "error" in committed
      ? `The evidence could not be committed on the branch (${committed.error}); these are its paths on the machine that ran the run.\n\n`
      : `The evidence is committed on this branch under \`${committed.paths[0]!.slice(0, committed.paths[0]!.lastIndexOf("/"))}/\`.\n\n`;
  return (
    `\n\n## QA evidence (loop ${loop})\n\n` +
    `The end-to-end check \`${qa.command}\` ${qa.exit_code === 0 ? "passed" : `failed (exit code ${qa.exit_code})`}.\n\n` +
    where +
    `Terminal recording (asciicast v2; \`asciinema play\` replays it): ${link(qa.cast)}\n\n` +
    `Screenshots of its steps:\n\n${shots}\n`
  );
}

/**
 * open-claude-design (also `design`): from a brief to a reviewed HTML
 * design and its specification, with a person in the loop.
 *
 *   atomic run open-claude-design --input prompt="A pricing page for our CLI" --input references=https://example.com --input references=docs/brand.md
 *
 * 1. Discovery: an interviewer agent stage (discover) asks the person
 *    what they want through its ask_user tool (each question parks the run
 *    like ctx.ask: atomic answer, the page, the terminal): the output type,
 *    additions to the brief, and the reference sites or local files when
 *    none were given as input; it answers with what it learned
 *    (structured). When that stage fails (its agent fails or gives no
 *    valid answer), the workflow asks the same three questions itself
 *    (ctx.ask), so the design never starts without them.
 * 2. References: each URL is fetched and each file read (the first 20,000
 *    characters; one that cannot be read is noted, not fatal). Each URL and
 *    each local HTML page (a .html/.htm file) is visited in headless
 *    Chromium once it is found (step 4), by a shell stage reference-NN in a
 *    sandbox (captureInSandbox: network only to the URL's own host, or
 *    none and the file's directory read-only; the artifact directory
 *    writable; journaled, so a resumed run does not visit it again;
 *    capturePage through playwright-core inside): a full-page screenshot
 *    (reference-NN-full.png, NN its place in the references) and a scroll
 *    sequence of 1280x800 viewports from the top (reference-NN-scroll-MM.png,
 *    at most 6); the designer is told where they are. A page that does not
 *    load is said in one sentence with a hint (the run's log, the designer's
 *    prompt, brief.json and the outputs) and the design goes on without it.
 * 3. Three analysis stages in parallel: design-system (where this project's
 *    design system is: tokens, theme files, components; structured),
 *    analysis (audience, goals, content, constraints) and patterns (layout
 *    and interaction patterns that fit). Together: design-context.md; a
 *    failed stage leaves its section marked unavailable.
 * 4. Review loop, round N: a generate stage writes preview.html (one
 *    self-contained page); a shell stage takes a screenshot of it with
 *    headless Chromium (screenshot-NN.png, 1280x800); the person answers
 *    accept / steer / discard (steer: a second question takes what to
 *    change, and round N+1 regenerates with it). Accept: an export stage
 *    writes spec.html. Discard: the run ends cancelled, without a spec.
 *
 * Finding Chromium (a recorded step, so a resumed run uses the same one):
 * the `chromium` input, else $ATOMIC_CHROMIUM, else the first of chromium,
 * chromium-browser, google-chrome, google-chrome-stable on PATH. With none,
 * the review goes on without a screenshot and the question says why and
 * how to install one. As root, Chromium runs with --no-sandbox (its
 * sandbox refuses root); as any other user, sandboxed.
 *
 * Artifacts, under <cwd>/.atomic/runs/open-claude-design-<run id>/:
 * brief.json (the interview's answers and the references),
 * reference-NN-full.png and reference-NN-scroll-MM.png, design-context.md, preview.html (the latest round's),
 * screenshot-NN.png (one per round), review.json (each round's decision
 * and feedback) and spec.html. An accepted design is also written to the
 * repository: every one of those files under <cwd>/<specs_dir>/<run id>/
 * (specs_dir: specs/design unless given).
 */
import { workflow, v, sh, captureInSandbox } from "atomic";

const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const DesignSystem = v.object({
  found: v.boolean(),
  paths: v.array(v.string()),
  summary: v.string(),
});
const OUTPUT_TYPES = ["web page", "app screen", "component", "slide", "email", "other"];
const Discovery = v.object({
  output_type: v.pipe(v.string(), v.minLength(1)),
  additions: v.string(),
  references: v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.maxLength(10)),
});
const BROWSERS = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"];
const NO_BROWSER =
  "no Chromium was found for the screenshot: install it (Debian/Ubuntu: apt-get install chromium; from a checkout of atomic: scripts/install-chromium.sh), " +
  "or name it with --input chromium=PATH or ATOMIC_CHROMIUM=PATH";
const REFERENCE_CHARS = 20_000;

/** The page in an agent's answer: a fenced html block, else from <!doctype or <html on, else the text in a <pre>. */
function htmlOf(text: string): string {
  const fenced = /```html\s*\n([\s\S]*?)```/i.exec(text);
  if (fenced) return fenced[1]!.trim() + "\n";
  const start = text.search(/<!doctype html|<html[\s>]/i);
  if (start >= 0) {
    const end = text.toLowerCase().lastIndexOf("</html>");
    return text.slice(start, end >= 0 ? end + 7 : undefined).trim() + "\n";
  }
  const escaped = text.replaceAll("&", "&amp;").replaceAll("<", "&lt;");
  return `<!doctype html>\n<html><body><pre>${escaped}</pre></body></html>\n`;
}

export default workflow({
  name: "open-claude-design",
  description: "Interview, analyse, generate an HTML preview, review its screenshot with a person, export a spec (also: design)",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("what to design")),
    references: v.optional(v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.maxLength(10), v.description("URLs or files to draw from (asked for when none)")), []),
    specs_dir: v.optional(v.pipe(v.string(), v.minLength(1), v.description("where an accepted design's files go, relative to the working directory (the repository)")), "specs/design"),
    chromium: optionalText("the Chromium (or Chrome) binary for screenshots (default: $ATOMIC_CHROMIUM, else found on PATH)"),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    analyst_runner: optionalText("runner of the three analysis stages (default: runner)"),
    analyst_model: optionalText("model of the three analysis stages (default: model)"),
  },
  outputs: v.object({
    decision: v.pipe(v.string(), v.description("accepted or discarded")),
    rounds: v.number(),
    preview: v.pipe(v.string(), v.description("preview.html")),
    screenshot: v.pipe(v.nullable(v.string()), v.description("the last round's screenshot (null without Chromium)")),
    spec: v.pipe(v.nullable(v.string()), v.description("spec.html (null when discarded)")),
    specs: v.pipe(v.nullable(v.string()), v.description("<specs_dir>/<run id>: the accepted design's files in the repository (null when discarded)")),
    reference_screenshots: v.pipe(
      v.array(v.object({ reference: v.string(), full: v.nullable(v.string()), scroll: v.array(v.string()), error: v.nullable(v.string()) })),
      v.description("each URL or local HTML reference visited in Chromium: its full-page PNG and scroll sequence, or why it did not load"),
    ),
    context: v.pipe(v.string(), v.description("design-context.md")),
    dir: v.pipe(v.string(), v.description("the artifact directory")),
  }),
  stages: [
    { name: "discover", description: "discovery: the interviewer agent asks you (ask_user) the output type, additions to the brief and, when none were given, the references" },
    { name: "output-type, brief, references", description: "the same questions asked by the workflow when the interviewer gives no usable answer" },
    { name: "design-system, analysis, patterns", description: "three analysis stages over the brief and the references (design-context.md)" },
    { name: "reference-NN", description: "a sandboxed shell stage: headless Chromium visits a URL (only its host reachable) or local HTML reference: a full-page screenshot and a scroll sequence" },
    { name: "generate-NN", description: "writes preview.html in round NN" },
    { name: "screenshot-NN", description: "a shell stage: headless Chromium screenshots the preview" },
    { name: "review-NN, steer-NN", description: "questions to you: accept, steer (what to change) or discard" },
    { name: "export", description: "writes spec.html once accepted" },
  ],
  async run(ctx) {
    const { prompt } = ctx.inputs;
    const designer = { runner: ctx.inputs.runner, model: ctx.inputs.model };
    const analyst = { runner: ctx.inputs.analyst_runner ?? designer.runner, model: ctx.inputs.analyst_model ?? designer.model };
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/open-claude-design-${ctx.runId}`);

    // 1. discovery: the interviewer agent asks the person (ask_user); without it, the workflow asks.
    const given = ctx.inputs.references;
    const questions = {
      outputType: `What should this design produce? Brief: ${prompt.slice(0, 300)}`,
      additions: `Anything to add to or correct in the brief (audience, content, must-haves)? Answer "ok" to keep it as it is.`,
      references: `References for the design: URLs (sites to visit) or local file paths, separated by spaces, or "none".`,
    };
    const discovered = await ctx.task("discover", {
      ...designer,
      tools: ["ask_user", "read", "list"],
      schema: Discovery,
      failureMode: "return",
      prompt:
        `You are the design interviewer. Find out what the person wants before anything is designed: ask them through the ask_user tool, one question at a time, ` +
        `and ask only them (the files here may help you ask well). Ask:\n1. "${questions.outputType}" with the choices ${OUTPUT_TYPES.map((t) => `"${t}"`).join(", ")};\n` +
        `2. "${questions.additions}"` +
        (given.length ? `.\nThe references are given: ${given.join(", ")}.` : `;\n3. "${questions.references}"`) +
        `\nThen answer with the output type, the additions ("ok" when none) and the references they named (URLs and paths as they gave them; none: an empty list).`,
    });
    const learned = discovered.status === "completed" ? v.safeParse(Discovery, discovered.structured) : undefined;
    let outputType: string;
    let additions: string;
    let references = given;
    if (learned?.success) {
      ({ output_type: outputType, additions } = learned.output);
      if (given.length === 0) references = learned.output.references;
    } else {
      ctx.log(`design: the interviewer gave no usable answer (${discovered.error?.message ?? "not the answer asked for"}); asking the questions directly.`);
      outputType = await ctx.ask(questions.outputType, { choices: OUTPUT_TYPES, name: "output-type" });
      additions = await ctx.ask(questions.additions, { name: "brief" });
      if (given.length === 0) {
        const named = await ctx.ask(questions.references, { name: "references" });
        references = named.trim().toLowerCase() === "none" ? [] : named.split(/[\s,]+/).filter(Boolean).slice(0, 10);
      }
    }
    const brief = `${prompt}${additions.trim().toLowerCase() === "ok" ? "" : `\n\nAdded in the interview: ${additions.trim()}`}\n\nOutput type: ${outputType}`;

    // 2. references
    const collected = await ctx.tool("collect-references", references, async ({ signal }) => {
      const out: { reference: string; text: string | null; error: string | null }[] = [];
      for (const ref of references) {
        try {
          const text = /^https?:\/\//i.test(ref)
            ? await fetch(ref, { signal: AbortSignal.any([signal, AbortSignal.timeout(15_000)]) }).then((r) => (r.ok ? r.text() : Promise.reject(new Error(`HTTP ${r.status}`))))
            : await Bun.file(ref.startsWith("/") ? ref : `${process.cwd()}/${ref}`).text();
          out.push({ reference: ref, text: text.slice(0, REFERENCE_CHARS), error: null });
        } catch (e) {
          out.push({ reference: ref, text: null, error: e instanceof Error ? e.message : String(e) });
        }
      }
      await Bun.write(`${dir}/brief.json`, JSON.stringify({ prompt, interviewed_by: learned?.success ? "discover" : "questions", output_type: outputType, additions, brief, references: out.map((r) => ({ reference: r.reference, error: r.error })) }, null, 2) + "\n");
      return out;
    });
    const referenceText = collected.length
      ? collected.map((r) => `### ${r.reference}\n${r.text ?? `(could not be read: ${r.error})`}`).join("\n\n")
      : "(none)";

    // 3. analysis, in parallel
    const common = `\n\nBrief:\n${brief}\n\nReferences:\n${referenceText}`;
    const [system, analysis, patterns] = (await ctx.parallel(
      [
        {
          name: "design-system",
          ...analyst,
          tools: ["read", "list", "grep"],
          schema: DesignSystem,
          failureMode: "return" as const,
          prompt:
            "You are the design-system locator. Find the design system this work must follow in this directory: design tokens, CSS variables, theme files, " +
            "component libraries, fonts. Answer whether you found one, its paths, and a summary of the values that matter." + common,
        },
        {
          name: "analysis",
          ...analyst,
          tools: ["read"],
          failureMode: "return" as const,
          prompt: "You are the design analyst. Analyse the brief and the references: audience, goals, content, constraints, tone." + common,
        },
        {
          name: "patterns",
          ...analyst,
          tools: ["read"],
          failureMode: "return" as const,
          prompt: "You are the pattern researcher. Name the layout, navigation and interaction patterns that fit this design, and the ones to avoid, with reasons." + common,
        },
      ],
      { failFast: false },
    )) as { status: string; text: string; structured?: unknown; error?: { message: string } }[];
    const ds = system!.status === "completed" ? v.safeParse(DesignSystem, system!.structured) : undefined;
    const section = (title: string, r: { status: string; text: string; error?: { message: string } }, body?: string) =>
      `## ${title}\n\n${r.status === "completed" ? (body ?? r.text) : `(unavailable: ${r.error?.message ?? r.status})`}\n`;
    const context =
      `# Design context\n\n${brief}\n\n` +
      section("Design system", system!, ds?.success ? `${ds.output.found ? `Found: ${ds.output.paths.join(", ")}` : "No design system found."}\n\n${ds.output.summary}` : undefined) +
      "\n" +
      section("Analysis", analysis!) +
      "\n" +
      section("Patterns", patterns!);
    const contextPath = `${dir}/design-context.md`;
    await ctx.tool("write-context", {}, () => Bun.write(contextPath, context));

    // 4. generate, screenshot, review
    const found = await ctx.tool("find-chromium", { chromium: ctx.inputs.chromium ?? null }, () => {
      const named = ctx.inputs.chromium ?? process.env.ATOMIC_CHROMIUM;
      if (named) return { path: Bun.which(named), missing: `${named} (${ctx.inputs.chromium ? "the chromium input" : "ATOMIC_CHROMIUM"}) is not an executable program` };
      const path = BROWSERS.map((b) => Bun.which(b)).find((p) => p) ?? null;
      return { path, missing: NO_BROWSER };
    });
    const browser = found.path;
    if (!browser) ctx.log(`design: ${found.missing}; the review goes on without screenshots.`);
    /** A shell stage: headless Chromium's 1280x800 screenshot of a file:// page into png. */
    const capture = (name: string, page: string, png: string, chromium: string) =>
      ctx.shell(
        name,
        sh`profile=$(mktemp -d) && trap 'rm -rf "$profile"' EXIT && set -- --headless --disable-gpu --hide-scrollbars --user-data-dir="$profile" --window-size=1280,800 --screenshot=${png} ${`file://${encodeURI(page)}`} && if [ "$(id -u)" = 0 ]; then set -- --no-sandbox "$@"; fi && ${chromium} "$@" && test -s ${png}`,
        { timeoutMs: 120_000, failureMode: "return" },
      );
    // The references that are pages (URLs, local HTML files), visited in Chromium.
    const referenceShots: { reference: string; full: string | null; scroll: string[]; error: string | null }[] = [];
    if (browser) {
      for (const [i, r] of collected.entries()) {
        if (!/^https?:\/\//i.test(r.reference) && !/\.html?$/i.test(r.reference)) continue;
        const nn = String(i + 1).padStart(2, "0");
        const shot = await captureInSandbox(ctx, `reference-${nn}`, r.reference, { chromium: browser, dir });
        if (shot.ok) referenceShots.push({ reference: r.reference, full: shot.value.full, scroll: shot.value.scroll, error: null });
        else {
          referenceShots.push({ reference: r.reference, full: null, scroll: [], error: shot.error });
          ctx.log(`design: ${shot.error}`);
        }
      }
      await ctx.tool("write-references", {}, () => Bun.write(`${dir}/references.json`, JSON.stringify(referenceShots, null, 2) + "\n"));
    }
    const shotsText = referenceShots.length
      ? `\n\nScreenshots of the references (a full page, then a scroll sequence of 1280x800 viewports from the top):\n` +
        referenceShots.map((r) => `- ${r.reference}: ${r.full ? `${r.full}; scroll: ${r.scroll.join(", ")}` : `not captured: ${r.error}`}`).join("\n")
      : "";
    const previewPath = `${dir}/preview.html`;
    const reviews: { round: number; decision: string; feedback: string | null; screenshot: string | null }[] = [];
    let html = "";
    let feedback = "";
    for (let round = 1; ; round++) {
      const nn = String(round).padStart(2, "0");
      const generated = await ctx.task(`generate-${nn}`, {
        ...designer,
        tools: [],
        prompt:
          `You are the designer (round ${round}). Write preview.html: one self-contained HTML page (inline CSS, no build step) showing the design. ` +
          `Answer with the page only.\n\n${context}${shotsText}` +
          (html ? `\n\nYour previous preview:\n${html}\n\nThe reviewer asked for these changes:\n${feedback}` : ""),
      });
      html = htmlOf(generated.text);
      await ctx.tool(`write-preview-${nn}`, { round }, () => Bun.write(previewPath, html));
      let screenshot: string | null = null;
      let why = browser ? "" : found.missing;
      if (browser) {
        const png = `${dir}/screenshot-${nn}.png`;
        const shot = await capture(`screenshot-${nn}`, previewPath, png, browser);
        if (shot.status === "completed") screenshot = png;
        else why = `the screenshot failed (${shot.error?.message ?? `exit ${shot.exitCode}`}; see ${shot.errorPath ?? shot.outputPath})`;
      }
      const decision = await ctx.ask(
        `Review the design (round ${round}): ${screenshot ? `screenshot ${screenshot}` : `no screenshot: ${why}`}; page ${previewPath}. ` +
          `accept exports spec.html, steer asks what to change, discard ends without a design.`,
        { choices: ["accept", "steer", "discard"], name: `review-${nn}` },
      );
      feedback = decision === "steer" ? await ctx.ask(`What should change in the design (round ${round})?`, { name: `steer-${nn}` }) : "";
      reviews.push({ round, decision, feedback: feedback || null, screenshot });
      await ctx.tool(`write-review-${nn}`, { round, decision }, () => Bun.write(`${dir}/review.json`, JSON.stringify(reviews, null, 2) + "\n"));
      const outputs = { rounds: round, preview: previewPath, screenshot, context: contextPath, reference_screenshots: referenceShots, dir };
      if (decision === "discard") {
        return ctx.exit({ status: "cancelled", reason: `the design was discarded at review round ${round}`, outputs: { decision: "discarded", ...outputs, spec: null, specs: null } });
      }
      if (decision === "accept") {
        const spec = await ctx.task("export", {
          ...designer,
          tools: [],
          prompt:
            `You are the spec writer. Write spec.html: one self-contained HTML design specification of the accepted design for the people who build it: ` +
            `purpose, layout, design tokens (colours, type, spacing), components and their states, content, and the accepted page's markup. Answer with the page only.\n\n` +
            `${context}\n\nThe accepted preview:\n${html}`,
        });
        const specPath = `${dir}/spec.html`;
        await ctx.tool("write-spec", {}, () => Bun.write(specPath, htmlOf(spec.text)));
        // The accepted design's files, in the repository.
        const specs = await ctx.tool("write-specs", { specs_dir: ctx.inputs.specs_dir }, async () => {
          const to = `${ctx.inputs.specs_dir.startsWith("/") ? "" : `${process.cwd()}/`}${ctx.inputs.specs_dir}/${ctx.runId}`;
          for (const name of new Bun.Glob("*").scanSync({ cwd: dir })) await Bun.write(`${to}/${name}`, Bun.file(`${dir}/${name}`));
          return to;
        });
        return { decision: "accepted", ...outputs, spec: specPath, specs };
      }
    }
  },
});

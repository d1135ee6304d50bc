/**
 * classify-and-act: a classifier stage (no tools) sorts the request into one
 * of the categories, answering {category, confidence, rationale}; an unknown
 * category, a confidence below the threshold or no usable answer asks a
 * person to choose (ctx.ask with the categories as choices); then one action
 * stage runs, with tools that fit the category: implementation may read,
 * edit, write and run commands; research may read and search; any other
 * category may only read.
 *
 *   atomic run classify-and-act --input prompt="Why does the build take so long?"
 *
 * Artifacts, under <cwd>/.atomic/runs/classify-and-act-<run id>/:
 * classification.json (proposed vs selected category, and why) and
 * action.md (the action stage's answer).
 */
import { workflow, v } from "atomic";

const optionalText = (what: string) => v.optional(v.pipe(v.string(), v.description(what)));

const Classification = v.object({
  category: v.string(),
  confidence: v.pipe(v.number(), v.minValue(0), v.maxValue(1)),
  rationale: v.string(),
});

const TOOLS: Record<string, string[]> = {
  implementation: ["read", "edit", "write", "bash"],
  research: ["read", "list", "grep"],
};

export default workflow({
  name: "classify-and-act",
  description: "Classify a request, ask a person when unsure, then act with tools fitting its category",
  inputs: {
    prompt: v.pipe(v.string(), v.minLength(1), v.description("the request")),
    categories: v.optional(
      v.pipe(v.array(v.pipe(v.string(), v.minLength(1))), v.minLength(1), v.maxLength(8), v.description("the categories to choose from")),
      ["analysis", "implementation", "research"],
    ),
    confidence_threshold: v.optional(
      v.pipe(v.number(), v.minValue(0.5), v.maxValue(0.99), v.description("below this confidence a person chooses")),
      0.75,
    ),
    runner: optionalText("runner of every stage (default: the configured one)"),
    model: optionalText("model of every stage"),
    classifier_runner: optionalText("runner of the classifier (default: runner)"),
    classifier_model: optionalText("model of the classifier (default: model)"),
  },
  outputs: v.object({
    category: v.pipe(v.string(), v.description("the selected category")),
    proposed: v.nullable(v.string()),
    selected_by: v.pipe(v.string(), v.description("classifier or human")),
    result: v.pipe(v.string(), v.description("the action stage's answer")),
    classification: v.pipe(v.string(), v.description("classification.json")),
    action: v.pipe(v.string(), v.description("action.md")),
  }),
  stages: [
    { name: "classify", description: "classifies the prompt into one of the categories, with its confidence" },
    { name: "choose-category", description: "a question to you when the category is unknown or the confidence low" },
    { name: "act", description: "acts on the prompt with the tools of its category" },
  ],
  async run(ctx) {
    const { prompt, categories, confidence_threshold } = ctx.inputs;
    const actor = { runner: ctx.inputs.runner, model: ctx.inputs.model };
    const classifier = { runner: ctx.inputs.classifier_runner ?? actor.runner, model: ctx.inputs.classifier_model ?? actor.model };
    const dir = await ctx.tool("artifact-dir", {}, () => `${process.cwd()}/.atomic/runs/classify-and-act-${ctx.runId}`);

    const answer = await ctx.task("classify", {
      ...classifier,
      tools: [],
      schema: Classification,
      failureMode: "return",
      prompt:
        `You are the classifier. Put the request into exactly one of these categories: ${categories.join(", ")}. ` +
        `Give your confidence from 0 to 1 and a one-sentence rationale.\n\nRequest:\n${prompt}`,
    });
    const parsed = answer.status === "completed" ? v.safeParse(Classification, answer.structured) : undefined;
    const proposal = parsed?.success ? parsed.output : undefined;
    const why = !proposal
      ? "the classifier gave no usable answer"
      : !categories.includes(proposal.category)
        ? `the classifier proposed ${JSON.stringify(proposal.category)}, which is not a category`
        : proposal.confidence < confidence_threshold
          ? `the classifier's confidence ${proposal.confidence} is below ${confidence_threshold}`
          : undefined;
    const selected = why
      ? await ctx.ask(`${why}${proposal ? ` (${proposal.rationale})` : ""}. Which category is this request? ${prompt.slice(0, 200)}`, {
          choices: categories,
          name: "choose-category",
        })
      : proposal!.category;
    const classificationPath = `${dir}/classification.json`;
    await ctx.tool("write-classification", {}, () =>
      Bun.write(
        classificationPath,
        JSON.stringify(
          {
            categories,
            proposed: proposal ?? null,
            selected,
            selected_by: why ? "human" : "classifier",
            reason: why ?? `confidence ${proposal!.confidence} is at least ${confidence_threshold}`,
          },
          null,
          2,
        ) + "\n",
      ),
    );

    const action = await ctx.task("act", {
      ...actor,
      tools: TOOLS[selected] ?? ["read"],
      prompt: `This request was classified as ${selected}. Handle it accordingly.\n\nRequest:\n${prompt}`,
    });
    const actionPath = `${dir}/action.md`;
    await ctx.tool("write-action", {}, () => Bun.write(actionPath, action.text));
    return {
      category: selected,
      proposed: proposal?.category ?? null,
      selected_by: why ? "human" : "classifier",
      result: action.text,
      classification: classificationPath,
      action: actionPath,
    };
  },
});

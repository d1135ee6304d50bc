/**
 * The stage names a run's workflow can prove (docs/design/engine.md, "Pinned
 * code"): `atomic send` refuses a stage name that no path of the workflow can
 * reach, so a typo fails at once instead of waiting forever for a stage that
 * never starts.
 *
 * The source is the run's pinned code (every local module the workflow file
 * imports, kept in the journal). Each file is stripped of its types by Bun's
 * transpiler and parsed with acorn; acorn-walk visits every call. A stage is
 * named by the first argument of `ctx.task(name, …)` and `ctx.shell(name, …)`,
 * and by the `name` of each object step in the array given to
 * `ctx.parallel([...])` or `ctx.chain([...])`. A nested stage's path is its
 * child workflows' names, then its own; only the last segment is checked here
 * (the journal's stage index judges the segments before it as the run goes).
 *
 * A name written as a string literal (or a template literal without
 * expressions) is proven. Anything else (a variable, a template literal with
 * expressions, a spread or a non-literal step array) means the workflow builds
 * names at run time: `computed` is then true and any name may exist, so the
 * sender is warned, not refused. So does a stage method called in a way the
 * scan cannot follow: destructured (`const { task } = ctx; task(…)`) or by a
 * computed key (`ctx[method](…)`): a false refusal of a real stage is worse
 * than a missed typo.
 *
 * Builtin workflows are scanned the same way: each is one self-contained
 * source file embedded in the binary (builtins.ts). A run recorded before
 * code was pinned has no source to read: a message to it is accepted with
 * no warning.
 */

import { parse } from "acorn";
import { simple } from "acorn-walk";

export interface StageNames {
  /** Stage names written as literals. */
  names: Set<string>;
  /** Some stage name is built at run time: any name may exist. */
  computed: boolean;
}

const NAMED_BY_FIRST_ARGUMENT = new Set(["task", "shell"]);
const STEP_ARRAYS = new Set(["parallel", "chain"]);
const STAGE_METHODS = new Set([...NAMED_BY_FIRST_ARGUMENT, ...STEP_ARRAYS]);

let transpiler: Bun.Transpiler | undefined;

/** The stage names the given sources (TypeScript or JavaScript modules) spell out. */
export function scanStageNames(sources: Iterable<string>): StageNames {
  transpiler ??= new Bun.Transpiler({ loader: "tsx", trimUnusedImports: false });
  const out: StageNames = { names: new Set(), computed: false };
  const name = (node: AnyNode | undefined) => {
    const literal = literalString(node);
    if (literal === undefined) out.computed = true;
    else out.names.add(literal);
  };
  for (const source of sources) {
    let tree;
    try {
      tree = parse(transpiler.transformSync(source), { ecmaVersion: "latest", sourceType: "module" });
    } catch {
      out.computed = true; // a file that cannot be read as code proves nothing: stay permissive
      continue;
    }
    simple(tree, {
      CallExpression(node) {
        const call = node as unknown as AnyNode;
        const callee = call.callee as AnyNode;
        // A stage method called other than as `x.task(…)` (destructured: `task(…)`, bound, or `ctx[m](…)`)
        // may name any stage: the scan cannot prove the names, so it stays permissive.
        if (callee.type === "Identifier" && STAGE_METHODS.has(callee.name as string)) out.computed = true;
        if (callee.type !== "MemberExpression") return;
        if (callee.computed) {
          if (literalString(callee.property as AnyNode) === undefined || STAGE_METHODS.has(literalString(callee.property as AnyNode)!)) out.computed = true;
          return;
        }
        const method = (callee.property as AnyNode).name as string | undefined;
        const args = call.arguments as AnyNode[];
        if (method && NAMED_BY_FIRST_ARGUMENT.has(method)) name(args[0]);
        if (method && STEP_ARRAYS.has(method)) {
          const steps = args[0];
          if (steps?.type !== "ArrayExpression") {
            out.computed = true;
            return;
          }
          for (const step of steps.elements as (AnyNode | null)[]) {
            if (!step || step.type === "ArrowFunctionExpression" || step.type === "FunctionExpression") continue;
            if (step.type !== "ObjectExpression") {
              out.computed = true;
              continue;
            }
            const prop = (step.properties as AnyNode[]).find((p) => p.type === "Property" && !p.computed && keyName(p.key as AnyNode) === "name");
            if (prop) name(prop.value as AnyNode);
            else out.computed = true;
          }
        }
      },
    });
  }
  return out;
}

type AnyNode = { type: string; [key: string]: unknown };

function keyName(key: AnyNode): string | undefined {
  if (key.type === "Identifier") return key.name as string;
  if (key.type === "Literal" && typeof key.value === "string") return key.value;
  return undefined;
}

function literalString(node: AnyNode | undefined): string | undefined {
  if (!node) return undefined;
  if (node.type === "Literal" && typeof node.value === "string") return node.value;
  if (node.type === "TemplateLiteral" && (node.expressions as unknown[]).length === 0) {
    return ((node.quasis as AnyNode[])[0]!.value as { cooked: string }).cooked;
  }
  return undefined;
}

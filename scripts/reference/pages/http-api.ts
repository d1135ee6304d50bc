/**
 * docs/reference/http-api.md: the status server's HTTP API, from the Hono
 * app in src/status/app.ts.
 *
 * The routes are the app's own (`createStatusApp(...).routes`, what Hono
 * dispatches on); what each one reads and answers comes from the syntax
 * tree the TypeScript compiler parsed: the comment above the route, its
 * path parameters, `c.req.query`/`intParam` (with default and range) and
 * `c.req.header` reads, and every status it can answer (`fail(c, status,
 * code)`, `c.json(body, status)`, ...), following the helpers of app.ts it
 * calls (`runOf`, ...). A status or code that is not a literal is given as
 * the checker types it (`404 | 409`). A route the app has and the tree does
 * not explain (or the reverse) fails the generator.
 */

import { isArrowFunction, isBinaryExpression, isCallExpression, isConditionalExpression, isNewExpression, isReturnStatement, SyntaxKind, isFunctionDeclaration, isIdentifier, isNumericLiteral, isPropertyAccessExpression, isStringLiteral, isVariableDeclaration, type CallExpression, type Node, type SourceFile } from "typescript/unstable/ast";
import type { Checker } from "typescript/unstable/async";
import { createStatusApp, type StatusAppOptions } from "../../../src/status/app.ts";
import { anchorOf, cell, generatedBanner, type ReferencePage } from "../lib/pages.ts";
import { leadingComment, nodeText, sourceFile, walk } from "../lib/typescript.ts";

const APP = "src/status/app.ts";

interface Answer {
  status: string;
  code?: string;
  note?: string;
}

interface RouteDoc {
  method: string;
  path: string;
  description: string;
  query: { name: string; note: string }[];
  headers: string[];
  answers: Answer[];
}

/** The routes Hono dispatches on, from an app made with inert parts (nothing is called while routes are registered). */
export function appRoutes(): { method: string; path: string }[] {
  const inert = {} as never;
  const app = createStatusApp({ source: inert, control: inert, token: "x".repeat(64), hosts: { allows: () => true, url: (p: string) => p } as never } as StatusAppOptions);
  return app.routes.filter((r) => r.method !== "ALL").map((r) => ({ method: r.method, path: r.path }));
}

function str(node: Node | undefined): string | undefined {
  return node && isStringLiteral(node) ? node.text : undefined;
}

function callName(call: CallExpression): string {
  const e = call.expression;
  if (isIdentifier(e)) return e.text;
  if (isPropertyAccessExpression(e)) {
    const inner = isPropertyAccessExpression(e.expression) ? `${isIdentifier(e.expression.expression) ? e.expression.expression.text : "?"}.${e.expression.name.text}` : isIdentifier(e.expression) ? e.expression.text : "?";
    return `${inner}.${e.name.text}`;
  }
  return "";
}

class AppTree {
  /** Functions and arrow functions declared in app.ts, by name (what handlers call). */
  private readonly helpers = new Map<string, Node>();

  constructor(
    readonly file: SourceFile,
    private readonly checker: Checker,
  ) {
    walk(file, (n) => {
      if (isFunctionDeclaration(n) && n.name && n.body) this.helpers.set(n.name.text, n);
      if (isVariableDeclaration(n) && isIdentifier(n.name) && n.initializer && isArrowFunction(n.initializer)) this.helpers.set(n.name.text, n.initializer);
    });
  }

  /** A status or code argument: its literal, else its type as the checker says it ("404 | 409"; "string": it varies). */
  private async literal(node: Node | undefined): Promise<string> {
    if (!node) return "";
    if (isNumericLiteral(node) || isStringLiteral(node)) return node.text;
    const helper = isCallExpression(node) && isIdentifier(node.expression) ? this.helpers.get(node.expression.text) : undefined;
    if (helper) {
      const returned = new Set<string>();
      walk(helper, (n) => {
        if (isReturnStatement(n) && n.expression && isNumericLiteral(n.expression)) returned.add(n.expression.text);
      });
      if (returned.size) return [...returned].sort().join(" | ");
    }
    const type = await this.checker.getTypeAtLocation(node);
    const text = type ? (await this.checker.typeToString(type)).replace(/"/g, "") : nodeText(this.file, node);
    return text === "string" ? "(the error's own code)" : text;
  }

  /** A bound of a range as written in the code (a literal, or an expression such as Number.MAX_SAFE_INTEGER). */
  private bound(node: Node | undefined): string {
    if (!node) return "";
    return isNumericLiteral(node) ? node.text.replace(/_/g, "") : `\`${nodeText(this.file, node)}\``;
  }

  /** What a handler (and the helpers of app.ts it calls, once each) reads and answers. */
  async explain(handler: Node, doc: RouteDoc, seen = new Set<string>(), bindings = new Map<string, string>()): Promise<void> {
    // A handler made by a factory of app.ts (`intercom("message")`): the factory's body, its parameters bound to the literals.
    if (isCallExpression(handler) && isIdentifier(handler.expression) && this.helpers.has(handler.expression.text)) {
      const factory = this.helpers.get(handler.expression.text)! as Node & { parameters?: readonly { name: Node }[] };
      const bound = new Map(bindings);
      (factory.parameters ?? []).forEach((p, i) => {
        const arg = str(handler.arguments[i]);
        if (arg !== undefined && isIdentifier(p.name)) bound.set(p.name.text, arg);
      });
      return this.explain(factory, doc, new Set([...seen, handler.expression.text]), bound);
    }
    const calls: CallExpression[] = [];
    const helpers: Node[] = [];
    prunedWalk(handler, bindings, (n) => {
      if (isCallExpression(n)) calls.push(n);
      if (isNewExpression(n) && nodeText(this.file, n.expression) === "Response") doc.answers.push({ status: "200", note: "a stream (the body as is)" });
      if (isIdentifier(n) && n.text !== "fail" && this.helpers.has(n.text) && !seen.has(n.text)) {
        seen.add(n.text);
        helpers.push(this.helpers.get(n.text)!);
      }
    });
    for (const call of calls) {
      const name = callName(call);
      const [a0, a1, a2, a3, a4] = call.arguments;
      if (name === "c.req.query" && str(a0) && !doc.query.some((q) => q.name === str(a0))) doc.query.push({ name: str(a0)!, note: "" });
      if (name === "intParam" && str(a1)) {
        const note = `a whole number from ${this.bound(a3)} to ${this.bound(a4)}, default ${this.bound(a2)}`;
        const at = doc.query.findIndex((q) => q.name === str(a1));
        if (at >= 0) doc.query[at]!.note = note;
        else doc.query.push({ name: str(a1)!, note });
      }
      if (name === "c.req.header" && str(a0) && !doc.headers.includes(str(a0)!)) doc.headers.push(str(a0)!);
      if (name === "fail") doc.answers.push({ status: await this.literal(a1), code: await this.literal(a2) });
      if (name === "c.json" || name === "c.body" || name === "c.html") {
        const status = a1 && (isNumericLiteral(a1) ? a1.text : undefined);
        const empty = a0 && nodeText(this.file, a0) === "null";
        doc.answers.push({ status: status ?? "200", note: name === "c.html" ? "HTML" : name === "c.json" ? "JSON" : empty ? "no body" : "the body as is" });
      }
    }
    for (const h of helpers) await this.explain(h, doc, seen, bindings);
  }
}

/** Like walk, but of a conditional on a bound parameter (`what === "message" ? a : b`) only the branch taken. */
function prunedWalk(node: Node, bindings: ReadonlyMap<string, string>, visit: (n: Node) => void): void {
  if (isConditionalExpression(node) && isBinaryExpression(node.condition) && node.condition.operatorToken.kind === SyntaxKind.EqualsEqualsEqualsToken) {
    const { left, right } = node.condition;
    const name = isIdentifier(left) ? left.text : undefined;
    const value = str(right);
    if (name !== undefined && value !== undefined && bindings.has(name)) {
      prunedWalk(bindings.get(name) === value ? node.whenTrue : node.whenFalse, bindings, visit);
      return;
    }
  }
  visit(node);
  node.forEachChild((child) => {
    prunedWalk(child, bindings, visit);
    return undefined;
  });
}

function unique(answers: Answer[]): Answer[] {
  const seen = new Set<string>();
  return answers
    .filter((a) => {
      const key = `${a.status} ${a.code ?? a.note ?? ""}`;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    })
    .sort((a, b) => a.status.localeCompare(b.status));
}

async function routeDocs(): Promise<{ routes: RouteDoc[]; common: Answer[]; intro: string }> {
  const { file, checker } = await sourceFile(APP);
  const tree = new AppTree(file, checker);
  const routes: RouteDoc[] = [];
  const common: RouteDoc = { method: "", path: "", description: "", query: [], headers: [], answers: [] };
  const registrations: { call: CallExpression; statement: Node }[] = [];
  walk(file, (n) => {
    if (!isCallExpression(n) || !isPropertyAccessExpression(n.expression) || !isIdentifier(n.expression.expression) || n.expression.expression.text !== "app") return;
    registrations.push({ call: n, statement: n });
  });
  for (const { call } of registrations) {
    const method = isPropertyAccessExpression(call.expression) ? call.expression.name.text : "";
    if (method === "use" || method === "onError" || method === "notFound") {
      for (const arg of call.arguments) await tree.explain(arg, common);
      continue;
    }
    if (!["get", "post", "put", "delete", "patch"].includes(method)) continue;
    const path = str(call.arguments[0]);
    const handler = call.arguments[1];
    if (!path || !handler) continue;
    const doc: RouteDoc = { method: method.toUpperCase(), path, description: leadingComment(file, call), query: [], headers: [], answers: [] };
    await tree.explain(handler, doc);
    routes.push(doc);
  }
  const live = appRoutes();
  const key = (r: { method: string; path: string }) => `${r.method} ${r.path}`;
  const missing = live.filter((r) => !routes.some((d) => key(d) === key(r)));
  const extra = routes.filter((d) => !live.some((r) => key(d) === key(r)));
  if (missing.length || extra.length) {
    throw new Error(`the HTTP reference and the app disagree: routes the tree does not explain: ${missing.map(key).join(", ") || "none"}; routes the app does not have: ${extra.map(key).join(", ") || "none"}`);
  }
  return { routes, common: unique(common.answers), intro: fileHeader(file) };
}

/** The prose of app.ts's header comment, as Markdown paragraphs. */
function fileHeader(file: SourceFile): string {
  const m = /^\s*\/\*\*([\s\S]*?)\*\//.exec(file.text);
  if (!m) return "";
  return m[1]!
    .split("\n")
    .map((l) => l.replace(/^\s*\* ?/, ""))
    .join("\n")
    .trim();
}

function answerRow(a: Answer): string {
  const what = a.code === undefined ? cell(a.note ?? "") : a.code.startsWith("(") ? cell(a.code) : `\`${cell(a.code)}\``;
  return `| ${cell(a.status)} | ${what} |`;
}

function anchor(r: RouteDoc): string {
  return anchorOf(`${r.method} ${r.path}`);
}

async function render(): Promise<string> {
  const { routes, common, intro } = await routeDocs();
  const lines = [
    generatedBanner(`${APP} (the Hono app)`),
    "# HTTP API reference",
    "",
    "The status server (`atomic serve`, or `atomic run --serve`) serves a page, this JSON API and server-sent event streams. How to use it, with examples: [Running as a service](../guides/service-and-schedules.md#status-page-and-api).",
    "",
    intro,
    "",
    "## Contents",
    "",
    "- [Every route](#every-route)",
    ...routes.map((r) => `- [\`${r.method} ${r.path}\`](#${anchor(r)})`),
    "",
    "## Every route",
    "",
    "Answers any route may give, before or after its own:",
    "",
    "| status | code |",
    "|---|---|",
    ...common.map(answerRow),
  ];
  for (const r of routes) {
    lines.push("", `## ${r.method} ${r.path}`, "");
    if (r.description) lines.push(r.description, "");
    const params = [...r.path.matchAll(/:(\w+)/g)].map((m) => m[1]!);
    if (params.length || r.query.length || r.headers.length) {
      lines.push("| parameter | in | meaning |", "|---|---|---|");
      for (const p of params) lines.push(`| \`${p}\` | path | |`);
      for (const q of r.query) lines.push(`| \`${q.name}\` | query | ${cell(q.note)} |`);
      for (const h of r.headers) lines.push(`| \`${h}\` | header | |`);
      lines.push("");
    }
    lines.push("| status | code or body |", "|---|---|");
    for (const a of unique(r.answers)) lines.push(answerRow(a));
  }
  return `${lines.join("\n")}\n`;
}

const page: ReferencePage = { path: "docs/reference/http-api.md", title: "the status server's routes, parameters and answers", render };
export default page;

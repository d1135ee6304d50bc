/**
 * docs/reference/sdk.md: what a workflow file can import from "atomic",
 * from the SDK's declarations (src/sdk/index.ts and what it re-exports).
 *
 * The TypeScript checker lists the module's exports and resolves each
 * re-export to its declaration; the page shows each declaration as the
 * source writes it (a function's signature without its body, a class's
 * heading and public members, an interface or type whole, comments
 * included) with its doc comment as the checker reads it.
 */

import { isClassDeclaration, type Node, type SourceFile } from "typescript/unstable/ast";
import { SymbolFlags, type Symbol as TsSymbol } from "typescript/unstable/async";
import { anchorOf, generatedBanner, type ReferencePage } from "../lib/pages.ts";
import { nodeText, sourceFile, typescriptProject } from "../lib/typescript.ts";

const ENTRY = "src/sdk/index.ts";

export interface SdkExport {
  name: string;
  kind: "function" | "class" | "interface" | "type" | "module" | "value";
  doc: string;
  declaration: string;
  source: string;
}

function kindOf(flags: number): SdkExport["kind"] {
  if (flags & SymbolFlags.Function) return "function";
  if (flags & SymbolFlags.Class) return "class";
  if (flags & SymbolFlags.Interface) return "interface";
  if (flags & SymbolFlags.TypeAlias) return "type";
  if (flags & (SymbolFlags.ValueModule | SymbolFlags.NamespaceModule)) return "module";
  return "value";
}

/** A declaration's text as the reader needs it: without a function's body, without a class's method bodies. */
function declarationText(file: SourceFile, node: Node): string {
  const withoutBody = (n: Node): string => {
    const own = nodeText(file, n);
    const body = (n as Node & { body?: Node }).body;
    return body ? file.text.slice(n.end - own.length, body.pos).trim() : own;
  };
  let text = withoutBody(node);
  if (isClassDeclaration(node)) {
    // The heading and one line per member, each without its body.
    const own = nodeText(file, node);
    const head = own.slice(0, own.indexOf("{") + 1);
    const members = node.members.map((m) => `  ${withoutBody(m).replace(/\s+/g, " ").replace(/\( /g, "(").replace(/,? \)/g, ")").replace(/;$/, "")};`);
    text = [head, ...members, "}"].join("\n");
  }
  return text.replace(/^export (declare )?/, "");
}

/** Every export of the SDK, values first, each group by name. */
export async function sdkExports(): Promise<SdkExport[]> {
  const { file, checker } = await sourceFile(ENTRY);
  const project = await typescriptProject();
  const moduleSymbol = await checker.getSymbolAtLocation(file);
  if (!moduleSymbol) throw new Error(`the checker finds no module symbol for ${ENTRY}`);
  const out: SdkExport[] = [];
  for (const sym of await checker.getExportsOfModule(moduleSymbol)) {
    const target: TsSymbol = sym.flags & SymbolFlags.Alias ? await checker.getAliasedSymbol(sym) : sym;
    const kind = kindOf(target.flags);
    const doc = (await checker.getDocumentationCommentOfSymbol(target)).trim();
    const handle = target.declarations[0];
    const node = handle ? await handle.resolve(project) : undefined;
    const declFile = handle ? await project.program.getSourceFile(handle.path) : undefined;
    const source = declFile ? declFile.fileName.replace(/^.*?\/(src\/|node_modules\/)/, "$1") : "";
    let declaration = "";
    if (kind === "module") declaration = `import { ${sym.name} } from "atomic"; // the ${source.startsWith("node_modules/") ? source.split("/")[1] : source} module`;
    else if (node && declFile) declaration = declarationText(declFile, node);
    if (kind === "value" && !/^(const|let|var) /.test(declaration)) declaration = `const ${declaration}`;
    out.push({ name: sym.name, kind, doc: kind === "module" && !doc && source.startsWith("node_modules/valibot") ? "valibot, re-exported: the schemas of inputs and structured output ([valibot.dev](https://valibot.dev))." : doc, declaration, source });
  }
  const order = ["function", "class", "module", "value", "interface", "type"];
  return out.sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind) || a.name.localeCompare(b.name));
}

async function render(): Promise<string> {
  const exports = await sdkExports();
  const groups: [string, SdkExport["kind"][]][] = [
    ["Functions", ["function"]],
    ["Classes", ["class"]],
    ["Modules and values", ["module", "value"]],
    ["Interfaces", ["interface"]],
    ["Types", ["type"]],
  ];
  const lines = [
    generatedBanner(`${ENTRY} (the SDK's declarations, read by the TypeScript checker)`),
    "# SDK reference",
    "",
    'What a workflow file can import from `"atomic"`. The binary provides the module itself, so a workflow file needs no `node_modules` next to it. How to use it: [Writing workflows](../guides/writing-workflows.md).',
    "",
    "## Contents",
    "",
  ];
  for (const [title, kinds] of groups) {
    const members = exports.filter((e) => kinds.includes(e.kind));
    if (!members.length) continue;
    lines.push(`- ${title}: ${members.map((e) => `[${e.name}](#${anchorOf(e.name)})`).join(", ")}`);
  }
  for (const [title, kinds] of groups) {
    const members = exports.filter((e) => kinds.includes(e.kind));
    if (!members.length) continue;
    lines.push("", `## ${title}`);
    for (const e of members) {
      lines.push("", `### ${e.name}`, "");
      if (e.doc) lines.push(e.doc, "");
      lines.push("```ts", e.declaration, "```");
      if (e.source.startsWith("src/")) lines.push("", `Declared in \`${e.source}\`.`);
    }
  }
  return `${lines.join("\n")}\n`;
}

const page: ReferencePage = { path: "docs/reference/sdk.md", title: 'what workflow files import from "atomic"', render };
export default page;

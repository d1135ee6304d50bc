/**
 * docs/reference/README.md: the index of the reference pages, listing
 * every other page of scripts/reference/pages/ (its path and title).
 */

import { basename } from "node:path";
import { generatedBanner, loadPages, type ReferencePage } from "../lib/pages.ts";

const PATH = "docs/reference/README.md";

async function render(): Promise<string> {
  const pages = (await loadPages()).filter((p) => p.path !== PATH);
  return [
    generatedBanner("scripts/reference/pages/"),
    "# Reference",
    "",
    "Generated from the code by `scripts/reference/generate.ts`; the docs test fails when a page is stale. Guides: [docs/guides](../guides/README.md). Design: [docs/design](../design/README.md).",
    "",
    ...pages.map((p) => `- [${basename(p.path, ".md")}](${basename(p.path)})${p.title ? `: ${p.title}` : ""}`),
    "",
  ].join("\n");
}

const page: ReferencePage = { path: PATH, title: "this index", render };
export default page;

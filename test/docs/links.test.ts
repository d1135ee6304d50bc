/**
 * Every relative link in README.md, docs/ and bench/README.md leads
 * somewhere: the file or directory exists, and an anchor (`#part`, on the
 * page itself or another Markdown page) is the id of one of that page's
 * headings as GitHub makes them. Links to other sites are not followed.
 * And every repository path a page names in code (`src/…`, `test/…`,
 * `scripts/…`, `bench/…`, `docs/…`) exists, so a file that moved is noticed.
 */

import { describe, expect, test } from "bun:test";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { ROOT } from "../../scripts/binary.ts";
import { documentationFiles, parsePage, type ParsedPage } from "./markdown.ts";

const pages = new Map<string, ParsedPage>(documentationFiles().map((f) => [f, parsePage(f)]));

function pageOf(path: string): ParsedPage | undefined {
  if (!pages.has(path) && existsSync(join(ROOT, path)) && path.endsWith(".md")) pages.set(path, parsePage(path));
  return pages.get(path);
}

/** What is wrong with `href` on `page`, or undefined. */
function brokenLink(page: ParsedPage, href: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(href)) return undefined; // https:, mailto:, ...
  const [target, anchor] = href.split("#", 2) as [string, string | undefined];
  const path = target === "" ? page.path : normalize(join(dirname(page.path), decodeURIComponent(target)));
  if (path.startsWith("..")) return `${href} leaves the repository`;
  if (!existsSync(join(ROOT, path))) return `${href}: no file ${path}`;
  if (anchor === undefined) return undefined;
  if (statSync(join(ROOT, path)).isDirectory() || !path.endsWith(".md")) return `${href}: an anchor into ${path}, which is not a Markdown page`;
  const ids = pageOf(path)!.headingIds;
  if (!ids.has(anchor)) return `${href}: ${path} has no heading with the id "${anchor}"`;
  return undefined;
}

describe("documentation links", () => {
  test("the pages are found", () => {
    expect([...pages.keys()]).toContain("README.md");
    expect([...pages.keys()].some((p) => p.startsWith("docs/guides/"))).toBe(true);
    expect([...pages.keys()].some((p) => p.startsWith("docs/design/"))).toBe(true);
    expect([...pages.keys()].some((p) => p.startsWith("docs/reference/"))).toBe(true);
  });

  for (const path of [...pages.keys()]) {
    test(`${path}: every relative link and anchor resolves`, () => {
      const page = pages.get(path)!;
      const broken = page.links.map((href) => brokenLink(page, href)).filter((b): b is string => b !== undefined);
      expect(broken).toEqual([]);
    });
  }

  for (const path of [...pages.keys()]) {
    test(`${path}: every repository path it names exists`, () => {
      const text = readFileSync(join(ROOT, path), "utf8");
      const named = [...text.matchAll(/`((?:src|test|scripts|bench|docs)\/[A-Za-z0-9_.\/-]*[A-Za-z0-9_])`/g)].map((m) => m[1]!);
      expect(named.filter((p) => !existsSync(join(ROOT, p)))).toEqual([]);
    });
  }

  test("the check itself refuses a missing file and a missing anchor", () => {
    const readme = pages.get("README.md")!;
    expect(brokenLink(readme, "docs/no-such-page.md")).toContain("no file");
    expect(brokenLink(readme, "docs/guides/README.md#no-such-heading")).toContain("no heading");
    expect(brokenLink(readme, "#no-such-heading")).toContain("no heading");
    expect(brokenLink(readme, "docs/guides/README.md")).toBeUndefined();
    expect(brokenLink(readme, "https://example.com/x#y")).toBeUndefined();
  });
});

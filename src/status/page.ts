/**
 * The web page's assets, embedded in the binary as text (no files next to
 * it, no CDN: the machine may be offline): one HTML shell for the run list
 * and the run page, eight scripts (helpers, graph and timeline, the run
 * page's actions, the agent conversation, the console's starting actions,
 * the cost page, the review of a stage's diff, the pages), two style sheets
 * (the page's, and highlight.js's colours for the diff's code). Hand-written, no build step. The HTML never carries the
 * status token: the page's requests are authenticated by the session cookie
 * (auth.ts).
 */

import { RUN_ORIGINS } from "../journal/run-origin.ts";
import { RUN_STATUSES } from "../journal/runs.ts";
import htmlBundle from "./page/index.html" with { type: "text" };
import css from "./page/style.css" with { type: "text" };
import appJs from "./page/app.js" with { type: "text" };
import domJs from "./page/dom.js" with { type: "text" };
import viewsJs from "./page/views.js" with { type: "text" };
import actionsJs from "./page/actions.js" with { type: "text" };
import conversationJs from "./page/conversation.js" with { type: "text" };
import operateJs from "./page/operate.js" with { type: "text" };
import usageJs from "./page/usage.js" with { type: "text" };
import reviewJs from "./page/review.js" with { type: "text" };
import hljsLight from "highlight.js/styles/github.css" with { type: "text" };
import hljsDark from "highlight.js/styles/github-dark.css" with { type: "text" };

// Imported as text, the HTML is a string (bun-types declares *.html as an HTMLBundle for Bun.serve routes).
const html = htmlBundle as unknown as string;

export interface PageAsset {
  body: string;
  type: string;
  etag: string;
}

function digest(text: string): string {
  return new Bun.CryptoHasher("sha256").update(text).digest("hex").slice(0, 16);
}

const asset = (body: string, type: string): PageAsset => ({ body, type, etag: `"${digest(body)}"` });
const JS = "text/javascript; charset=utf-8";
const ASSETS: Record<string, PageAsset> = {
  "dom.js": asset(domJs, JS),
  "views.js": asset(viewsJs, JS),
  "actions.js": asset(actionsJs, JS),
  "conversation.js": asset(conversationJs, JS),
  "operate.js": asset(operateJs, JS),
  "usage.js": asset(usageJs, JS),
  "review.js": asset(reviewJs, JS),
  "app.js": asset(appJs, JS),
  "style.css": asset(css, "text/css; charset=utf-8"),
  // highlight.js's GitHub colours for the diff's code (review.js), light and dark as the page is.
  "highlight.css": asset(`${hljsLight}\n@media (prefers-color-scheme: dark) {\n${hljsDark}\n}\n`, "text/css; charset=utf-8"),
};

/** `/assets/<name>?v=<digest>`: a new binary's assets are never read from an old cache. */
const href = (name: string) => `/assets/${name}?v=${ASSETS[name]!.etag.slice(1, 9)}`;

const SHELL = html
  .replace("__DOM_JS__", href("dom.js"))
  .replace("__VIEWS_JS__", href("views.js"))
  .replace("__ACTIONS_JS__", href("actions.js"))
  .replace("__CONVERSATION_JS__", href("conversation.js"))
  .replace("__OPERATE_JS__", href("operate.js"))
  .replace("__USAGE_JS__", href("usage.js"))
  .replace("__REVIEW_JS__", href("review.js"))
  .replace("__HIGHLIGHT_CSS__", href("highlight.css"))
  .replace("__APP_JS__", href("app.js"))
  .replace("__STYLE_CSS__", href("style.css"))
  .replace("<body>", `<body data-statuses="${RUN_STATUSES.join(" ")}" data-origins="${RUN_ORIGINS.join(" ")}">`);

export function pageAsset(name: string): PageAsset | undefined {
  return Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
}

/** The page's HTML shell (the same for every page; the scripts read the address). */
export function pageHtml(): string {
  return SHELL;
}

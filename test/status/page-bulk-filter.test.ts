/**
 * Bulk actions over a filter, in headless Chromium against the real binary
 * (`atomic serve` over a journal of seeded runs): with every run of a page
 * ticked and more matching on later pages, the list offers every run that
 * matches its filter; the confirmation names that count, and the server
 * lists the runs again when it acts (`POST /api/runs/bulk` with `filter`).
 * Bad filters are refused in one sentence with a hint: an empty one (it
 * would take every run), one that matches nothing, a bad status, both
 * `runs` and `filter`.
 */

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { killSpawned } from "../helpers/atomic.ts";
import { removeTempDirs } from "../helpers/temp.ts";
import { HAVE_CHROMIUM, closePageAndServer, launchBrowser, newPage, releaseBrowser, seededHome, signIn, startServe } from "./browser-support.ts";
import { checkLayout } from "./layout-check.ts";

declare const document: { querySelectorAll(s: string): { length: number }; querySelector(s: string): { textContent: string | null } | null };

beforeAll(launchBrowser);
afterAll(releaseBrowser);
afterEach(async () => {
  await killSpawned();
  removeTempDirs();
});

describe.skipIf(!HAVE_CHROMIUM)("bulk actions over the list's filter", () => {
  test("every run matching the filter, on every page, after a confirmation naming the count; bad filters refused", async () => {
    const seeded = await seededHome([...Array.from({ length: 55 }, () => ({ stages: 1, workflow: "nightly" })), { stages: 1, workflow: "other" }, { stages: 1, workflow: "other" }]);
    const home = seeded.home;
    const nightly = new Set(seeded.runIds.slice(0, 55));
    const { proc: server, url, login } = await startServe(home);
    const token = /[?&]token=([0-9a-f]+)/.exec(login)![1]!;
    const bulk = async (body: unknown) => {
      const res = await fetch(`${url}api/runs/bulk`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: res.status, body: (await res.json()) as { error?: { code: string; message: string; hint?: string }; results?: { runId: string; ok: boolean; error?: { code: string } }[] } };
    };
    const { page, errors } = await newPage(1400, 900);
    try {
      await signIn(page, login, url);
      await page.fill("#workflow-filter", "nightly");
      await page.press("#workflow-filter", "Enter");
      // The list's count, not only its pages: 55 filtered runs and the 57 before the filter are both "page 1 of 2" (a
      // wait for that alone went on with the unfiltered list in the hog run of 3f3d984).
      await page.waitForFunction(() => document.querySelector("#list-count")?.textContent === "55 runs" && document.querySelector("#page-info")?.textContent === "page 1 of 2", undefined, { timeout: 15_000 });
      expect(await page.$$eval("tr[data-run]", (els) => els.length)).toBe(50);
      // Nothing beyond this page is offered until every run of it is ticked.
      expect(await page.isHidden("#bulk-all")).toBe(true);
      await page.check("#pick-all");
      expect(await page.textContent("#bulk-all")).toBe("The 50 runs of this page are selected. select all 55 runs matching the list");
      await page.click("#bulk-all-pick");
      expect(await page.textContent("#bulk-all")).toBe("All 55 runs matching the list are selected. select this page's only");
      await checkLayout(page, "bulk-all-matching");
      let asked = "";
      page.once("dialog", (d) => {
        asked = d.message();
        void d.accept();
      });
      await page.click("#bulk-cancel");
      await page.waitForFunction(() => /^cancelled \d+ of \d+/.test(document.querySelector("#bulk-result")?.textContent ?? ""), undefined, { timeout: 30_000 });
      expect(asked).toBe("Cancel 55 runs matching the list?");
      // The seeded runs have ended: each of the 55 is refused by name (none of the other workflow's is touched).
      const result = (await page.textContent("#bulk-result"))!.split("\n");
      expect(result[0]).toBe("cancelled 0 of 55");
      expect(new Set(result.slice(1).map((line) => line.split(":")[0]))).toEqual(nightly);
      // Changing the filter drops "every run matching": the selection is this page's again.
      await page.fill("#workflow-filter", "");
      await page.press("#workflow-filter", "Enter");
      await page.waitForFunction(() => document.querySelector("#list-count")?.textContent === "57 runs" && document.querySelector("#page-info")?.textContent === "page 1 of 2" && document.querySelectorAll("tr[data-run]").length === 50, undefined, { timeout: 15_000 });
      expect(await page.isHidden("#bulk-all")).toBe(true);
      expect(errors).toEqual([]);

      // The API: the same over a filter; its refusals.
      const all = await bulk({ action: "cancel", filter: "workflow=nightly" });
      expect(all.status).toBe(200);
      expect(new Set(all.body.results!.map((r) => r.runId))).toEqual(nightly);
      expect(new Set(all.body.results!.map((r) => (r.ok ? "ok" : r.error!.code)))).toEqual(new Set(["already_ended"]));
      const refusals: [unknown, string, string, string][] = [
        [{ action: "cancel", filter: "" }, "empty_filter", "the filter names nothing to match, so it would cancel every run", "filter"],
        [{ action: "cancel", filter: "workflow=&q=" }, "empty_filter", "the filter names nothing to match, so it would cancel every run", "filter"],
        [{ action: "resume", filter: "workflow=none" }, "no_runs", "no runs match the filter, so there is nothing to resume", "change the filter"],
        [{ action: "cancel", filter: "status=bogus" }, "bad_status", "status must be one of", ""],
        [{ action: "cancel", filter: 3 }, "bad_body", "\"filter\" must be the run list's query, a string", "filter"],
        [{ action: "cancel", filter: "workflow=nightly", runs: [] }, "bad_body", 'send either "runs" or "filter", not both', "filter"],
      ];
      for (const [body, code, message, hint] of refusals) {
        const r = await bulk(body);
        expect({ status: r.status, code: r.body.error?.code }).toEqual({ status: 400, code });
        expect(r.body.error!.message).toContain(message);
        expect(r.body.error!.hint ?? "").toContain(hint);
      }
    } finally {
      await closePageAndServer(page, server);
    }
  }, 180_000);
});

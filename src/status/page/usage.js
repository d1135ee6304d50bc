// atomic status page, part 5 (before app.js): the cost page (/usage), from
// GET /api/usage, the report `atomic usage --json` prints (status/usage-report.ts):
// the same sums as `atomic show`, to the token and the micro-dollar.
//
// - totals over the runs started since the chosen time;
// - a bar per day (UTC) of money, drawn as SVG, its exact figure on hover;
// - a table by workflow, stage, model or runner (the grouping picked);
// - the costliest runs and the costliest stages.
//
// The grouping and the time are kept in the address (?by=, ?since=).
"use strict";
(() => {
  const { h, s, fill, fmtCost, api } = window.atomic;
  const GROUPS = ["workflow", "stage", "model", "runner"];
  const n = (x) => x.toLocaleString("en-US");

  /** Money per day as bars, scaled to the dearest day; the figure of each day on hover and below the chart. */
  function dayChart(days) {
    if (days.length === 0) return h("p", { class: "muted", text: "no usage in this period" });
    const max = Math.max(...days.map((d) => d.costMicroUsd), 1);
    const W = 28, GAP = 6, H = 120;
    const width = days.length * (W + GAP);
    return h("div", { class: "chart-wrap" }, s("svg", { class: "day-chart", id: "day-chart", viewBox: `0 0 ${width} ${H + 18}`, width, height: H + 18, role: "img", "aria-label": "cost per day" },
      days.map((d, i) => {
        const bh = Math.max(1, Math.round((d.costMicroUsd / max) * H));
        return s("g", { class: "day", "data-day": d.key, "data-cost": d.costMicroUsd },
          s("title", { text: `${d.key}: ${fmtCost(d.costMicroUsd)}, ${n(d.inputTokens + d.outputTokens + d.cacheReadTokens + d.cacheWriteTokens)} tokens` }),
          s("rect", { x: i * (W + GAP), y: H - bh, width: W, height: bh, rx: 3 }),
          s("text", { x: i * (W + GAP) + W / 2, y: H + 13, "text-anchor": "middle", text: d.key.slice(5) }));
      })));
  }

  function table(id, head, rows) {
    return h("div", { class: "table-wrap" }, h("table", { class: "runs usage", id }, h("thead", {}, h("tr", {}, head.map((c) => h("th", { text: c })))),
      h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map(([label, value]) => h("td", { "data-label": label }, value)))))));
  }

  const usageCells = (g) => [["runs", n(g.runs)], ["in", n(g.inputTokens)], ["cached", n(g.cacheReadTokens)], ["cache write", n(g.cacheWriteTokens)], ["out", n(g.outputTokens)], ["turns", n(g.turns)], ["cost", fmtCost(g.costMicroUsd)]];

  function usagePage($main, $crumbs) {
    const params = new URLSearchParams(location.search);
    let by = GROUPS.includes(params.get("by")) ? params.get("by") : "workflow";
    let since = params.get("since") || "30d";
    fill($crumbs, h("a", { href: "/", text: "runs" }), " / ", h("span", { text: "cost" }));
    document.title = "atomic: cost";
    const bySelect = h("select", { id: "usage-by", "aria-label": "group by", onchange: () => { by = bySelect.value; sync(); load(); } }, GROUPS.map((g) => h("option", { value: g, text: `by ${g}` })));
    bySelect.value = by;
    const sinceInput = h("input", { type: "search", id: "usage-since", class: "narrow", value: since, placeholder: "since: 7d, 2026-12-01", "aria-label": "runs started since (an age or an ISO date or time)",
      onkeydown: (e) => { if (e.key === "Enter") { since = sinceInput.value.trim(); sync(); load(); } } });
    const problem = h("div");
    const totals = h("div", { class: "totals", id: "usage-totals" });
    const chart = h("div", { id: "usage-days" });
    const groups = h("div", { id: "usage-groups" });
    const top = h("div", { id: "usage-top" });
    fill($main, h("div", { class: "card" }, h("div", { class: "toolbar" }, h("h2", { text: "Cost" }), bySelect, sinceInput), problem, totals),
      h("div", { class: "card" }, h("h2", { text: "Per day (UTC)" }), chart),
      h("div", { class: "card" }, groups), top);

    function sync() {
      history.replaceState(null, "", `/usage?${new URLSearchParams({ by, since })}`);
    }
    async function load() {
      const q = (b) => `/api/usage?by=${b}${since ? `&since=${encodeURIComponent(since)}` : ""}`;
      let report, days, stages;
      try {
        [report, days, stages] = await Promise.all([api(q(by)), api(q("day")), by === "stage" ? null : api(q("stage"))]);
      } catch (err) {
        fill(problem, h("p", { class: "error", id: "usage-problem", text: `${err.message}${err.hint ? ` (${err.hint})` : ""}` }));
        return;
      }
      fill(problem);
      stages = stages || report;
      const t = report.total;
      const cell = (value, label, id) => h("div", { id }, h("b", { text: value }), h("span", { text: label }));
      fill(totals, cell(fmtCost(t.costMicroUsd), "cost", "usage-cost"), cell(n(report.runs), "runs"), cell(n(t.inputTokens), "input tokens"),
        cell(n(t.cacheReadTokens), "cache reads"), cell(n(t.cacheWriteTokens), "cache writes"), cell(n(t.outputTokens), "output tokens"), cell(n(t.turns), "turns"));
      fill(chart, dayChart(days.groups));
      fill(groups, h("h2", { text: `By ${by}` }), report.groups.length === 0 ? h("p", { class: "muted", text: `no usage in ${report.runs} run${report.runs === 1 ? "" : "s"}` })
        : table("usage-table", [by, "runs", "in", "cached", "cache write", "out", "turns", "cost"], report.groups.map((g) => [[by, g.key], ...usageCells(g)])));
      fill(top, h("div", { class: "card" }, h("h2", { text: "Costliest runs" }), report.topRuns.length === 0 ? h("p", { class: "muted", text: "none with a cost" })
        : table("usage-top-runs", ["run", "workflow", "cost"], report.topRuns.map((r) => [["run", h("a", { class: "mono", href: `/runs/${r.runId}`, text: r.runId })], ["workflow", r.workflow], ["cost", fmtCost(r.costMicroUsd)]]))),
        h("div", { class: "card" }, h("h2", { text: "Costliest stages" }), stages.groups.length === 0 ? h("p", { class: "muted", text: "none with a cost" })
          : table("usage-top-stages", ["stage", "runs", "tokens", "cost"], stages.groups.slice(0, 5).map((g) => [["stage", g.key], ["runs", n(g.runs)], ["tokens", n(g.inputTokens + g.outputTokens + g.cacheReadTokens + g.cacheWriteTokens)], ["cost", fmtCost(g.costMicroUsd)]]))));
      document.body.dataset.usageLoaded = String(Number(document.body.dataset.usageLoaded || 0) + 1);
    }
    load();
  }

  window.atomic.usage = { usagePage };
})();

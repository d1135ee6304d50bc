// atomic status page, last part (after dom.js, views.js, actions.js and
// conversation.js): hand-written, no framework, no build step.
// Routes: "/" is the run list, "/runs/<id>" a run's page. Data comes from the
// JSON API; a run page follows the run's server-sent event stream and
// re-reads the run on every change, so it updates live without reloading.
//
// Stage counts are of the stages that have started ("11 done, 2 running"):
// a workflow is code that decides as it goes which stages come next, so
// nobody knows the total before it ends, and "11/13" would read as nearly
// done when it is not. Stages waiting for admission are counted apart.
"use strict";
(() => {
  const STATUSES = (document.body.dataset.statuses || "running completed failed cancelled blocked interrupted skipped").split(" ");
  const ORIGINS = (document.body.dataset.origins || "schedule api cli rerun fork recovery").split(" ");
  const { h, clear, fill, fmtDuration, fmtTime, fmtCost, fmtTokens, badge, live, api, hostName } = window.atomic;
  const { graphSvg, renderTimeline, revealRow, legend, countsText } = window.atomic.views;
  const { createActions } = window.atomic.actions;
  const { renderConversation } = window.atomic.conversation;
  const { startForm, bulkBar, runActions, forkButton } = window.atomic.operate;
  const { createReview } = window.atomic.review;

  /** "11 done, 1 failed, 2 running" over the stages that started; "none started" before the first. */
  function stageSummary(st, waiting = 0) {
    if (!st.total && !waiting) return "none started";
    return `${countsText(st)}${waiting ? `, ${waiting} waiting` : ""}`;
  }

  const $main = document.getElementById("main");
  const $crumbs = document.getElementById("crumbs");
  const $conn = document.getElementById("conn");

  function setConn(text, cls) {
    $conn.textContent = text;
    $conn.className = `conn ${cls || ""}`;
  }

  // ------------------------------------------------------------ run list

  function listPage() {
    const params = new URLSearchParams(location.search);
    let status = STATUSES.includes(params.get("status")) ? params.get("status") : "";
    let offset = Math.max(0, Number(params.get("offset")) || 0);
    // The search runs in the journal (GET /api/runs): text, workflow, time range and tags, with paging over what matches.
    const filters = { q: params.get("q") || "", workflow: params.get("workflow") || "", since: params.get("since") || "", until: params.get("until") || "", tag: params.get("tag") || "", origin: ORIGINS.includes(params.get("origin")) ? params.get("origin") : "" };
    const limit = 50;
    let data = null;
    let timer = 0;
    let typing = 0;
    let loads = 0;
    fill($crumbs, h("span", { text: "runs" }), " · ", h("a", { href: "/usage", id: "nav-usage", text: "cost" }));
    document.title = "atomic: runs";

    const select = h("select", { "aria-label": "status", onchange: () => { status = select.value; offset = 0; sync(); load(); } },
      h("option", { value: "", text: "all statuses" }), STATUSES.map((st) => h("option", { value: st, text: st })));
    select.value = status;
    // How runs were started (journal/run-origin.ts says what each selects).
    const originSelect = h("select", { id: "origin-filter", "aria-label": "origin", onchange: () => { filters.origin = originSelect.value; offset = 0; sync(); load(); } },
      h("option", { value: "", text: "all origins" }), ORIGINS.map((o) => h("option", { value: o, text: o })));
    originSelect.value = filters.origin;
    /** A search field of the toolbar: the list reloads from the first page a moment after typing stops, or on Enter. */
    const field = (name, attrs) => {
      const el = h("input", { type: "search", value: filters[name], ...attrs, oninput: () => { clearTimeout(typing); typing = setTimeout(apply, 350); },
        onkeydown: (e) => { if (e.key === "Enter") { clearTimeout(typing); apply(); } } });
      const apply = () => { const v = el.value.trim(); if (v === filters[name]) return; filters[name] = v; offset = 0; sync(); load(); };
      return el;
    };
    const search = field("q", { id: "run-search", placeholder: "search id, workflow, inputs, outputs, errors", "aria-label": "search runs" });
    const workflowInput = field("workflow", { id: "workflow-filter", class: "narrow", placeholder: "workflow", "aria-label": "filter by workflow" });
    const sinceInput = field("since", { id: "since-filter", class: "narrow", placeholder: "since: 2h, 2026-12-01", "aria-label": "started since (an age or an ISO date or time)" });
    const untilInput = field("until", { id: "until-filter", class: "narrow", placeholder: "until", "aria-label": "started before (an age or an ISO date or time)" });
    // Runs with every tag typed ("team=search env=prod").
    const tagInput = field("tag", { id: "tag-filter", class: "narrow", placeholder: "tags: team=search", "aria-label": "filter by tags" });
    const count = h("span", { class: "muted", id: "list-count" });
    const body = h("tbody");
    const pageInfo = h("span", { class: "muted", id: "page-info" });
    const prev = h("button", { class: "btn", id: "page-newer", text: "← newer", onclick: () => { offset = Math.max(0, offset - limit); sync(); load(); } });
    const next = h("button", { class: "btn", id: "page-older", text: "older →", onclick: () => { offset += limit; sync(); load(); } });
    const problem = h("div");
    // Ticked runs (by id), kept across reloads of the list while they are on it; or, once asked for with every run of
    // this page ticked, every run matching the list's filter (`matching`: that filter's query, dropped when it changes).
    const picked = new Set();
    let matching = null;
    const pickAll = h("input", { type: "checkbox", id: "pick-all", "aria-label": "select every run on this page", onchange: () => {
      for (const r of rows()) { if (pickAll.checked) picked.add(r.id); else picked.delete(r.id); }
      if (!pickAll.checked) matching = null;
      render();
    } });
    const allMatching = h("div", { class: "bulk-all muted", id: "bulk-all", hidden: true });
    const starting = startForm();
    const bulk = bulkBar(() => (matching !== null ? { filter: matching, count: data.total } : { runs: [...picked] }), () => { picked.clear(); matching = null; load(); });
    // The schedules (read-only: atomic schedule changes them), shown when there are any.
    const schedBody = h("tbody");
    const schedCard = h("div", { class: "card", id: "schedules", hidden: true },
      h("h2", { text: "schedules" }),
      h("table", { class: "runs schedules" }, h("thead", {}, h("tr", {}, ["schedule", "cron", "workflow", "state", "next tick", "last run"].map((c) => h("th", { text: c })))), schedBody));
    fill($main, starting.form, h("div", { class: "card" },
      h("div", { class: "toolbar" }, select, originSelect, search, workflowInput, sinceInput, untilInput, tagInput, count, starting.button), bulk, allMatching, problem,
      h("table", { class: "runs" }, h("thead", {}, h("tr", {}, h("th", {}, pickAll), ["run", "workflow", "status", "origin", "started", "duration", "stages", "cost"].map((c) => h("th", { text: c })))), body),
      h("div", { class: "pager" }, prev, pageInfo, next)), schedCard);

    async function loadSchedules() {
      try {
        const { schedules } = await api("/api/schedules");
        schedCard.hidden = schedules.length === 0;
        clear(schedBody);
        for (const sc of schedules) {
          schedBody.append(h("tr", { "data-schedule": sc.name },
            h("td", { "data-label": "schedule", class: "mono", text: sc.name }),
            h("td", { "data-label": "cron", class: "mono", text: `${sc.cron} (${sc.timezone || "UTC"})` }),
            h("td", { "data-label": "workflow", text: sc.workflow }),
            h("td", { "data-label": "state" }, badge(sc.paused ? "paused" : "active")),
            h("td", { "data-label": "next tick", text: sc.nextTickAt ? fmtTime(sc.nextTickAt) : "" }),
            h("td", { "data-label": "last run" }, sc.lastRunId ? [h("a", { class: "mono", href: `/runs/${sc.lastRunId}`, text: sc.lastRunId }), " ", sc.lastRunStatus ? badge(sc.lastRunStatus) : null] : "")));
        }
      } catch {
        // the run list above says when the server cannot be reached
      }
    }

    function sync() {
      const p = new URLSearchParams();
      if (status) p.set("status", status);
      if (offset) p.set("offset", String(offset));
      for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v);
      history.replaceState(null, "", `/${p.toString() ? `?${p}` : ""}`);
    }
    async function load() {
      clearTimeout(timer);
      try {
        const q = new URLSearchParams(filterQuery());
        q.set("limit", String(limit));
        q.set("offset", String(offset));
        const asked = ++loads;
        const got = await api(`/api/runs?${q}`);
        if (asked !== loads) return; // a later search was sent meanwhile: its answer is the one to show
        data = got;
        void loadSchedules();
        clear(problem);
        setConn("live", "live");
        render();
      } catch (err) {
        // A search the server refuses (a time it cannot read) is said under the toolbar; the list stays as it was.
        fill(problem, h("p", { class: "error", id: "list-problem", text: `${err.message}${err.hint ? ` (${err.hint})` : ""}` }));
        if (err.status !== 400) setConn("reconnecting", "down");
      }
      timer = setTimeout(load, document.visibilityState === "visible" ? 2000 : 10000);
    }
    /** The list's filter as the API's query (no paging): what "every run matching the list" means, here and to the server. */
    function filterQuery() {
      const q = new URLSearchParams();
      if (status) q.set("status", status);
      for (const k of ["q", "workflow", "since", "until", "origin"]) if (filters[k]) q.set(k, filters[k]);
      for (const t of filters.tag.split(/\s+/).filter(Boolean)) q.append("tag", t);
      return q.toString();
    }
    function rows() {
      return data ? data.runs : [];
    }
    function render() {
      if (!data) return;
      const shown = rows();
      for (const id of [...picked]) if (!data.runs.some((r) => r.id === id)) picked.delete(id);
      pickAll.checked = shown.length > 0 && shown.every((r) => picked.has(r.id));
      renderAllMatching(shown.length);
      count.textContent = `${data.total} run${data.total === 1 ? "" : "s"}`;
      prev.disabled = offset === 0;
      const pages = Math.max(1, Math.ceil(data.total / limit));
      pageInfo.textContent = `page ${Math.min(pages, Math.floor(offset / limit) + 1)} of ${pages}`;
      next.disabled = offset + limit >= data.total;
      clear(body);
      if (shown.length === 0) body.append(h("tr", {}, h("td", { colspan: 9, class: "muted", text: status || Object.values(filters).some(Boolean) ? "no run matches the filter" : "no runs yet: start one with atomic run <workflow file>" })));
      for (const r of shown) {
        const st = r.stages;
        const pick = h("input", { type: "checkbox", class: "pick", "data-run": r.id, "aria-label": `select ${r.id}`, onchange: () => { if (pick.checked) picked.add(r.id); else picked.delete(r.id); } });
        pick.checked = picked.has(r.id);
        body.append(h("tr", { "data-run": r.id },
          h("td", { "data-label": "select" }, pick),
          h("td", { "data-label": "run" }, h("a", { class: "mono", href: `/runs/${r.id}`, text: r.id })),
          h("td", { "data-label": "workflow" }, r.workflow, r.tags ? h("span", { class: "tags" }, Object.entries(r.tags).map(([k, v]) => h("span", { class: "tag", "data-tag": `${k}=${v}`, text: `${k}=${v}` }))) : null),
          h("td", { "data-label": "status" }, badge(r.status), r.recovered ? h("span", { class: "muted recovered", title: `the service resumed this run ${r.recovered} time${r.recovered === 1 ? "" : "s"}`, text: " recovered" }) : null),
          // How it was started, and "recovery" once the service recovered it (status/run-origins.ts).
          h("td", { "data-label": "origin", class: "origin", text: r.origins && r.origins.length ? r.origins.join(", ") : "" }),
          h("td", { "data-label": "started", text: fmtTime(r.createdAt) }),
          h("td", { "data-label": "duration", text: fmtDuration(r.durationMs) }),
          h("td", { "data-label": "stages", text: stageSummary(st) }),
          h("td", { "data-label": "cost", text: r.usage ? fmtCost(r.usage.costMicroUsd) : "" })));
      }
    }
    /** With this page's runs all ticked and more matching on other pages: offer (or say) every run matching the list. */
    function renderAllMatching(shown) {
      const query = filterQuery();
      if (matching !== null && (matching !== query || !pickAll.checked)) matching = null;
      allMatching.hidden = !(pickAll.checked && data.total > shown);
      if (allMatching.hidden) return;
      const n = `${data.total} run${data.total === 1 ? "" : "s"}`;
      fill(allMatching, matching !== null
        ? [`All ${n} matching the list are selected. `, h("button", { class: "btn", id: "bulk-all-clear", type: "button", text: "select this page's only", onclick: () => { matching = null; render(); } })]
        : [`The ${shown} runs of this page are selected. `, h("button", { class: "btn", id: "bulk-all-pick", type: "button", text: `select all ${n} matching the list`, onclick: () => { matching = query; render(); } })]);
    }
    load();
  }

  // ------------------------------------------------------------ run page

  function runPage(runId) {
    let detail = null;
    let index = new Map();
    let selected = null;
    let loading = false;
    let dirty = false;
    let debounce = 0;
    let rendered = 0;
    /** What the graph and the timeline were last drawn from (render). */
    let shownShape = "";
    const out = { key: "", stdout: 0, stderr: 0, busy: false, turns: null, conv: false };

    const head = h("div", { class: "head" });
    const notices = h("div");
    const totals = h("div", { class: "totals" });
    const graphWrap = h("div", { class: "graph-wrap", id: "graph" });
    /** The graph's zoom the reader chose; null: fitted to the frame. */
    let graphZoom = null;
    const zoomLabel = h("span", { class: "muted", id: "zoom-level" });
    const zoomBar = h("div", { class: "zoom" },
      h("button", { class: "btn", id: "zoom-out", title: "zoom out (Ctrl+wheel)", "aria-label": "zoom out", text: "−", onclick: () => zoomBy(1 / 1.25) }),
      h("button", { class: "btn", id: "zoom-fit", title: "fit the graph to the frame", text: "fit", onclick: () => { graphZoom = null; drawGraph(); } }),
      h("button", { class: "btn", id: "zoom-in", title: "zoom in (Ctrl+wheel)", "aria-label": "zoom in", text: "+", onclick: () => zoomBy(1.25) }),
      zoomLabel);
    const gantt = h("div", { class: "gantt", id: "timeline" });
    const panel = h("div", { class: "panel", id: "panel" }, h("p", { class: "muted", text: "Click a stage to see its details and output." }));
    const io = h("div");
    const review = createReview(runId, schedule);
    const actions = createActions(runId, schedule, (stage) => review.show(stage));
    const starts = runActions(runId);
    fill($main, head, notices, starts.element, actions.element, review.element,
      h("div", { class: "card" }, totals),
      h("div", { class: "layout" },
        h("div", {}, h("div", { class: "card" }, h("div", { class: "graph-head" }, h("h2", { text: "Stage graph" }), zoomBar), graphWrap, legend()),
          h("div", { class: "card" }, h("h2", { text: "Timeline" }), gantt)),
        h("div", { class: "card", id: "stage-card" }, h("h2", { text: "Stage" }), panel)),
      io);
    fill($crumbs, h("a", { href: "/", text: "runs" }), " / ", h("span", { class: "mono", text: runId }));

    function schedule() {
      clearTimeout(debounce);
      debounce = setTimeout(refresh, 120);
    }
    async function refresh() {
      if (loading) { dirty = true; return; }
      loading = true;
      try {
        detail = await api(`/api/runs/${runId}`);
        render();
      } catch (err) {
        fill(notices, h("p", { class: "error", text: err.status === 404 ? `No run ${runId}. ${err.message}` : err.message }));
      } finally {
        loading = false;
        if (dirty) { dirty = false; schedule(); }
      }
    }

    function render() {
      const t0 = performance.now();
      const run = detail.run;
      document.title = `atomic: ${run.workflow} ${run.status}`;
      index = new Map();
      indexReport(detail.report, "", 0);
      renderHead(run);
      renderTotals(run, detail.totals, (detail.report.waiting || []).length);
      actions.update(detail);
      review.update(detail);
      starts.update(detail);
      // The graph and the timeline are built again only when what they show changed: a refresh that changed nothing
      // (the stream's "ready" just after the page's first load) must not replace a node between the press and the
      // release of a reader's click, which would lose the click.
      const shape = JSON.stringify([run, detail.report]);
      if (shape !== shownShape) {
        shownShape = shape;
        drawShape();
      }
      renderPanel();
      renderIo(run);
      rendered++;
      document.body.dataset.runStatus = run.status;
      document.body.dataset.renders = String(rendered);
      const ms = performance.now() - t0;
      window.atomicRender = { count: rendered, firstMs: rendered === 1 ? ms : window.atomicRender.firstMs, lastMs: ms, nodes: detail.graph.nodeCount };
    }

    // The graph pans and zooms inside its frame, never clipped: it starts fitted to the frame's width (not below a
    // quarter of its size; wider than that, the frame scrolls); −, + and Ctrl+wheel zoom, dragging the background pans.
    // The graph and the timeline: a fan-out opened or closed on either changes both (views.js).
    function drawShape() {
      drawGraph();
      renderTimeline(gantt, detail.run, index, selected, select, drawShape);
    }
    function drawGraph() {
      const svg = graphSvg(detail.graph, selected, select, drawShape);
      const W = Number(svg.getAttribute("width")), H = Number(svg.getAttribute("height"));
      const fit = Math.max(0.25, Math.min(1, (graphWrap.clientWidth - 2) / W));
      const z = graphZoom ?? fit;
      svg.setAttribute("width", String(Math.round(W * z)));
      svg.setAttribute("height", String(Math.round(H * z)));
      svg.dataset.zoom = String(z);
      const { scrollLeft, scrollTop } = graphWrap;
      fill(graphWrap, svg);
      graphWrap.scrollLeft = scrollLeft;
      graphWrap.scrollTop = scrollTop;
      zoomLabel.textContent = `${Math.round(z * 100)}%`;
    }
    function zoomBy(factor) {
      const svg = graphWrap.querySelector("svg.graph");
      const current = svg ? Number(svg.dataset.zoom) : 1;
      graphZoom = Math.min(3, Math.max(0.25, current * factor));
      drawGraph();
    }
    graphWrap.addEventListener("wheel", (ev) => {
      if (!ev.ctrlKey && !ev.metaKey) return;
      ev.preventDefault();
      zoomBy(ev.deltaY < 0 ? 1.2 : 1 / 1.2);
    }, { passive: false });
    let drag = null;
    graphWrap.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0 || ev.target.closest(".node, .fanout")) return;
      drag = { x: ev.clientX, y: ev.clientY, left: graphWrap.scrollLeft, top: graphWrap.scrollTop };
      graphWrap.setPointerCapture(ev.pointerId);
      graphWrap.classList.add("panning");
    });
    graphWrap.addEventListener("pointermove", (ev) => {
      if (!drag) return;
      graphWrap.scrollLeft = drag.left - (ev.clientX - drag.x);
      graphWrap.scrollTop = drag.top - (ev.clientY - drag.y);
    });
    const endDrag = () => { drag = null; graphWrap.classList.remove("panning"); };
    graphWrap.addEventListener("pointerup", endDrag);
    graphWrap.addEventListener("pointercancel", endDrag);

    function indexReport(report, prefix, depth) {
      for (const step of report.steps) {
        const path = prefix ? `${prefix}/${step.name}` : step.name;
        index.set(`${report.run.id}:${step.position}`, { step, report, path, depth });
        if (step.child) indexReport(step.child, path, depth + 1);
      }
    }

    function renderHead(run) {
      const controls = h("div", { class: "controls" });
      if (!run.parentId && (run.status === "running" || run.status === "paused" || run.status === "awaiting_input")) {
        const paused = run.status === "paused" || run.control === "pause";
        controls.append(
          h("button", { class: "btn", id: "btn-pause", text: paused ? "Unpause" : "Pause", onclick: () => control(paused ? "unpause" : "pause") }),
          h("button", { class: "btn danger", id: "btn-cancel", text: "Cancel", onclick: () => { if (confirm("Cancel this run? Its running stages are stopped.")) control("cancel"); } }));
      }
      const meta = h("div", { class: "meta" },
        h("span", {}, badge(run.status)),
        h("span", { class: "mono", text: run.id }),
        h("span", { text: `started ${fmtTime(run.createdAt)}` }),
        h("span", { id: "run-duration", text: fmtDuration(run.durationMs) }),
        run.code ? h("span", { id: "run-code", class: "mono", title: "the code version this run is pinned to (atomic show RUN --code prints it)", text: `code ${run.code}` }) : null,
        detail.report.tags ? h("span", { id: "run-tags", class: "tags" }, Object.entries(detail.report.tags).map(([k, v]) => h("span", { class: "tag", text: `${k}=${v}` }))) : null,
        run.parentId ? h("span", {}, "child of ", h("a", { class: "mono", href: `/runs/${run.parentId}`, text: run.parentId })) : null,
        run.holder ? h("span", { id: "run-holder" }, `driven by pid ${run.holder.pid} on `, hostName(run.holder.host)) : null,
        run.origin ? h("span", { id: "run-origin" }, `${run.origin.kind} of `, h("a", { class: "mono", href: `/runs/${run.origin.runId}`, text: run.origin.runId }),
          run.origin.at ? ` at #${run.origin.at.position} (${run.origin.at.name})` : "") : null,
        // A chain of runs (ctx.continueAsNew): the run this one continues, and the run that continued it.
        detail.report.continuedFrom ? h("span", { id: "run-continues" }, "continues ", h("a", { class: "mono", href: `/runs/${detail.report.continuedFrom}`, text: detail.report.continuedFrom })) : null,
        detail.report.continuedAs ? h("span", { id: "run-continued-as" }, "continued as ", h("a", { class: "mono", href: `/runs/${detail.report.continuedAs}`, text: detail.report.continuedAs })) : null,
        run.recoveredByService ? h("span", { id: "run-recovered", text: `recovered by the service ${run.recoveredByService === 1 ? "once" : `${run.recoveredByService} times`}` }) : null);
      fill(head, h("div", {}, h("h1", { text: run.workflow }), meta), controls);
      clear(notices);
      if (run.status === "paused") notices.append(h("p", { class: "notice", text: "Paused: no new stage starts until it is unpaused; running stages go on." }));
      // Queued stages no live worker host serves (the server asks the host registry: src/engine/queue-waits.ts).
      for (const { step, path } of index.values()) {
        if (step.queueWait) notices.append(h("p", { class: "notice queue-wait", "data-stage": path, text: `${path}: ${step.queueWait}` }));
      }
      // A reason given to ctx.exit by a run that did not fail (skipped, blocked, cancelled) is a notice, not an error.
      if (run.errorInfo) notices.append(h("p", { class: run.errorInfo.code === "exit" && run.status !== "failed" ? "notice" : "error", text: `${run.errorInfo.message}${run.errorInfo.hint ? `\nhint: ${run.errorInfo.hint}` : ""}` }));
    }

    function renderTotals(run, t, waiting) {
      const cell = (value, label, id) => h("div", { id }, h("b", { text: value }), h("span", { text: label }));
      fill(totals,
        h("div", { id: "t-stages", class: "wide", title: "stages that have started; the workflow decides as it runs which come next, so there is no total before it ends" },
          h("b", { text: stageSummary(t.stages, waiting) }), h("span", { text: live(run.status) ? "stages so far" : "stages" })),
        cell(String(t.attempts), "attempts"),
        cell(String(t.childRuns), "child runs"),
        cell(fmtDuration(run.durationMs), "duration", "t-duration"),
        t.usage ? cell(fmtCost(t.usage.costMicroUsd), "cost", "t-cost") : null,
        t.usage ? cell(fmtTokens(t.usage), "tokens", "t-tokens") : null);
    }

    function renderIo(run) {
      const block = (label, value) => value === undefined || value === null ? null
        : h("details", {}, h("summary", { text: label }), h("pre", { class: "json", text: JSON.stringify(value, null, 2) }));
      clear(io);
      const kids = [block("Inputs", run.inputs), block("Outputs", run.outputs)].filter(Boolean);
      if (kids.length) io.append(h("div", { class: "card" }, kids));
    }

    // A stage of a live root run that has not ended: pause or unpause it alone (atomic pause RUN STAGE).
    function stagePauseButton(step, path) {
      if (step.kind !== "stage" || detail.run.parentId || !live(detail.run.status) || step.status === "completed" || step.status === "failed") return null;
      const paused = (detail.report.pausedStages || []).includes(path);
      return h("button", { class: "btn", id: "btn-stage-pause", type: "button", text: paused ? "Unpause stage" : "Pause stage", onclick: () => control(paused ? "unpause" : "pause", path) });
    }

    async function control(action, stage) {
      try {
        await api(`/api/runs/${runId}/control`, {
          method: "POST",
          headers: { "content-type": "application/json", accept: "application/json" },
          body: JSON.stringify(stage === undefined ? { action } : { action, stage }),
        });
        schedule();
      } catch (err) {
        alert(`${action} failed: ${err.message}${err.hint ? `\n${err.hint}` : ""}`);
      }
    }

    // -------------------------------------------------------- stage panel

    function select(id) {
      if (selected === id) return;
      selected = id;
      out.key = "";
      for (const el of document.querySelectorAll(".node.sel, .row.sel")) el.classList.remove("sel");
      revealRow(gantt, id);
      for (const el of document.querySelectorAll(`[data-id="${CSS.escape(id)}"]`)) if (!el.classList.contains("group")) el.classList.add("sel");
      renderPanel();
    }

    function renderPanel() {
      const e = selected && index.get(selected);
      if (!e) return;
      const { step, report, path } = e;
      const took = step.startedAt ? fmtDuration((step.endedAt || Date.now()) - step.startedAt) : "";
      const rows = [["path", path], ["kind", step.kind], ["position", step.position], ["attempts", String(step.attempts)],
        ["started", fmtTime(step.startedAt)], ["took", took]];
      if (step.exitCode !== undefined && step.exitCode !== null) rows.push(["exit code", String(step.exitCode)]);
      // The host of a worker id is an identity ("name/machine/boot/pidns", or a --host-id): its name part is shown, the whole on hover.
      if (step.ranOn) rows.push(["host", h("span", { id: "stage-host" }, hostName(step.ranOn.host), step.ranOn.remote ? " (worker host)" : " (the root's machine)")]);
      if (step.queueWait) rows.push(["waiting", h("span", { id: "stage-queue-wait", text: step.queueWait })]);
      if (step.usage) rows.push(["usage", h("span", { id: "stage-usage", text: `${fmtTokens(step.usage)} tokens, ${fmtCost(step.usage.costMicroUsd)}` })]);
      if (step.childRunId) rows.push(["child run", h("a", { class: "mono", href: `/runs/${step.childRunId}`, text: step.childRunId })]);
      for (const a of step.attemptLog || []) {
        const queued = a.queuedAt && a.queuedAt < a.startedAt ? `queued ${fmtDuration(a.startedAt - a.queuedAt)}, ` : "";
        rows.push([`attempt ${a.attempt}`, h("span", { class: "attempt", "data-attempt": a.attempt, text: `${a.status}: ${queued}ran ${fmtDuration((a.endedAt || Date.now()) - a.startedAt)}` })]);
      }
      const key = `${report.run.id}:${step.position}:${step.attempts}`;
      const fresh = out.key !== key;
      let stdout = panel.querySelector("#stage-stdout");
      let stderr = panel.querySelector("#stage-stderr");
      if (fresh || !stdout) {
        stdout = h("pre", { class: "out", id: "stage-stdout" });
        stderr = h("pre", { class: "out err", id: "stage-stderr", hidden: true });
      }
      let conv = fresh ? null : panel.querySelector("#stage-conv");
      if (!conv) conv = h("div", { id: "stage-conv" });
      fill(panel, 
        h("h2", {}, h("span", { id: "stage-name", text: step.name }), " ", badge(step.status)),
        h("dl", {}, rows.map(([k, v]) => [h("dt", { text: k }), h("dd", {}, v)])),
        step.error ? h("p", { class: "error", text: step.error.message }) : null,
        (step.warnings || []).map((w) => h("p", { class: "notice stage-warning", text: `warning: ${w}` })),
        step.kind === "tool" && step.result !== undefined ? h("pre", { class: "json", text: JSON.stringify(step.result, null, 2) }) : null,
        report.run.id === runId && !detail.run.parentId ? forkButton(runId, step, live(detail.run.status)) : null,
        stagePauseButton(step, path),
        step.workspace ? h("button", { class: "btn", id: "btn-diff", type: "button", text: "Diff and review", onclick: () => review.show(path) }) : null,
        step.kind === "stage" ? h("div", { id: "stage-messages" }) : null,
        step.kind === "stage" ? [h("div", { class: "muted", text: "output" }), conv, stdout, stderr] : null);
      if (step.kind === "stage") {
        loadMessages(path);
        if (fresh) Object.assign(out, { key, stdout: 0, stderr: 0, turns: null, conv: false });
        loadOutput(report.run.id, step, key);
      }
    }

    // The messages sent to this stage, each with its delivery state and why (src/journal/delivery-states.ts).
    async function loadMessages(path) {
      let box;
      try {
        box = await api(`/api/runs/${runId}/inbox`);
      } catch {
        return; // the panel shows the rest; the next render tries again
      }
      const list = panel.querySelector("#stage-messages");
      const mine = box.stages.find((s) => s.stage === path);
      if (!list || !mine) return;
      fill(list, h("div", { class: "muted", text: "messages" }), h("ul", { class: "messages" }, mine.messages.map((m) =>
        h("li", { class: "msg", "data-id": m.id, "data-state": m.state },
          h("span", { class: `badge d-${m.state}`, text: m.state }), " ", h("span", { text: m.text }),
          m.reason ? h("span", { class: "muted", text: ` (${m.reason})` }) : null))));
    }

    async function loadOutput(ownerRun, step, key) {
      if (out.busy) return;
      out.busy = true;
      try {
        for (;;) {
          const turns = step.status === "running" || out.turns ? "" : "&turns=1";
          const t = await api(`/api/runs/${ownerRun}/stages/${encodeURIComponent(step.position)}/transcript?stdout=${out.stdout}&stderr=${out.stderr}${turns}`);
          if (out.key !== key) return;
          const so = panel.querySelector("#stage-stdout"), se = panel.querySelector("#stage-stderr");
          if (!so || !se) return;
          // The artifact store's cap dropped the head of a long file: say how much is missing before what follows.
          if (t.stdout.offset > out.stdout) appendCapped(so, `[… ${t.stdout.offset - out.stdout} bytes not kept by the artifact store …]\n`);
          if (t.stderr.offset > out.stderr) appendCapped(se, `[… ${t.stderr.offset - out.stderr} bytes not kept by the artifact store …]\n`);
          appendCapped(so, t.stdout.text);
          appendCapped(se, t.stderr.text);
          if (t.agent && (t.stdout.text || t.turns)) showConversation(so, t.turns);
          if (se.textContent) se.hidden = false;
          so.hidden = out.conv || (!so.textContent && !!se.textContent);
          if (!so.textContent && !se.textContent && !t.live) so.textContent = t.stdout.missing ? "(no output file)" : "(no output)";
          out.stdout = t.stdout.next;
          out.stderr = t.stderr.next;
          if (!t.stdout.more && !t.stderr.more) {
            if (t.live) setTimeout(() => { if (out.key === key) loadOutput(ownerRun, step, key); }, 700);
            return;
          }
        }
      } catch (err) {
        const so = panel.querySelector("#stage-stdout");
        if (so) so.textContent = `output unavailable: ${err.message}`;
      } finally {
        out.busy = false;
      }
    }

    /** An agent's transcript as a conversation (conversation.js), the raw text kept hidden beside it. */
    function showConversation(so, turns) {
      const conv = panel.querySelector("#stage-conv");
      if (!conv) return;
      if (turns) out.turns = turns;
      const el = renderConversation(so.textContent, out.turns);
      if (!el) return;
      const opened = new Set([...conv.querySelectorAll("details[open]")].map((d, i) => i));
      fill(conv, el);
      [...conv.querySelectorAll("details")].forEach((d, i) => { if (opened.has(i)) d.open = true; });
      out.conv = true;
    }

    function appendCapped(pre, text) {
      if (!text) return;
      const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(text);
      if (pre.textContent.length > 1_000_000) pre.textContent = `…${pre.textContent.slice(-800_000)}`;
      if (stick) pre.scrollTop = pre.scrollHeight;
    }

    // -------------------------------------------------------- live updates

    const es = new EventSource(`/api/runs/${runId}/stream?from=now`);
    es.addEventListener("open", () => setConn("live", "live"));
    es.addEventListener("ready", schedule);
    es.addEventListener("journal", schedule);
    es.addEventListener("error", () => setConn("reconnecting", "down"));
    let ticks = 0;
    setInterval(() => {
      if (!detail || !live(detail.run.status)) return;
      // A driver that dies (kill -9) writes no event: look again now and then, so a crashed run shows as crashed.
      if (++ticks % 3 === 0) schedule();
      const el = document.getElementById("run-duration");
      const d = fmtDuration(Date.now() - detail.run.createdAt);
      if (el) el.textContent = d;
      const t = document.querySelector("#t-duration b");
      if (t) t.textContent = d;
    }, 1000);
    refresh();
  }

  // Generated ids and callers' keys (a-z 0-9 . _ -: src/shared/ids.ts).
  const m = /^\/runs\/([0-9a-z._-]+)\/?$/.exec(location.pathname);
  if (m) runPage(m[1]);
  else if (location.pathname === "/usage") window.atomic.usage.usagePage($main, $crumbs);
  else listPage();
})();

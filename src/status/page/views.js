// atomic status page, part 2: the stage graph and the timeline.
//
// The graph comes from the API as series-parallel blocks (seq: one after
// another, left to right; par: side by side, top to bottom; node: a step,
// a child workflow drawn as a box around its own graph) plus the list of
// edges. The layout is recursive: each block is measured, then placed;
// edges are drawn between the right edge of one node and the left edge of
// the next.
//
// A fan-out (a par block of FANOUT_MIN or more branches, whatever each
// branch holds: one stage, several steps one after another, a child
// workflow, a fan-out of its own) is drawn as one box, "shard-* 30: 28
// done, 1 failed, 1 running" (its branches counted by state: a branch is
// running while any of its steps runs, failed when one failed, done when
// all are), until it is clicked open; then its branches are drawn inside
// a frame whose header closes it again. Which fan-outs are open is kept
// across re-renders. Edges to and from a closed fan-out's steps end at its
// box (drawn once per pair); edges inside it are not drawn.
//
// The timeline has a row per step and a bar per attempt; the time an
// attempt waited before it started (queuedAt: for admission, or for a
// worker of the pool) is a separate,
// hatched bar in front of it. A fan-out closed on the graph is one row
// there too ("▸ shard-* 300: 300 done"), its bar from its first step's
// start to its last one's end; clicking it opens the fan-out in both.
// Up to ROWS_ALL rows are all drawn; more (a fan-out of 1,000 opened) are
// a list that scrolls in a frame of its own, drawing only the rows in view
// and a margin around them as it scrolls (each row is ROW_H px high), so
// every row can be reached and the page stays quick; a step selected on
// the graph is scrolled into view.
"use strict";
(() => {
  const { h, s, fill, fmtDuration, badge, live, clip } = window.atomic;

  const NW = 156, NH = 40, HG = 34, VG = 12, PAD = 10, HEAD = 22, JS = 12, FW = 210, FH = 44;
  const FANOUT_MIN = 5;
  const open = new Set();
  /** Node id -> its closed fan-out, as the graph was last drawn (the timeline groups their rows the same way). */
  let closedFans = new Map();
  /** Rows up to this many are all drawn; more scroll in a frame (FRAME_H px high, ROW_H px a row as style.css has it) drawn in part. */
  const ROWS_ALL = 400, ROW_H = 22, FRAME_H = 440, OVERSCAN = 30;
  /** Per timeline element: its scrolling frame's position and the row selected when it was last drawn (kept across re-renders). */
  const frames = new WeakMap();

  /** Every step node of a block (joins left out), a child workflow's own steps included. */
  function stepNodes(b, out = []) {
    if (b.type === "node") {
      if (b.node.kind !== "join") out.push(b.node);
      if (b.node.group) stepNodes(b.node.group.body, out);
    } else for (const it of b.type === "seq" ? b.items : b.branches) stepNodes(it, out);
    return out;
  }

  /** A fan-out's branches (each: its first step, its state, all its steps), or null for a par block of fewer than FANOUT_MIN. */
  function fanBranches(b) {
    if (b.branches.length < FANOUT_MIN) return null;
    return b.branches.map((br) => {
      const nodes = stepNodes(br);
      return { head: nodes[0], status: fanStatus(nodes), nodes };
    }).filter((br) => br.head);
  }

  /** "shard-*" for shard-0 … shard-29; "fan-out" when the names share no start. */
  function fanName(nodes) {
    let prefix = nodes[0].name;
    for (const n of nodes) while (!n.name.startsWith(prefix)) prefix = prefix.slice(0, -1);
    return prefix && nodes.some((n) => n.name !== prefix) ? `${prefix}*` : prefix || "fan-out";
  }

  /** "28 done, 1 failed, 1 running" from counts by state (states with none left out, but done). */
  function countsText(c) {
    return [`${c.completed || 0} done`, c.failed ? `${c.failed} failed` : "", c.running ? `${c.running} running` : "", c.queued ? `${c.queued} queued` : "", c.stopped ? `${c.stopped} stopped` : ""].filter(Boolean).join(", ");
  }

  function stateCounts(items) {
    const c = { completed: 0, failed: 0, running: 0, queued: 0, stopped: 0 };
    for (const n of items) c[n.status] = (c[n.status] || 0) + 1;
    return countsText(c);
  }

  /** A fan-out as drawn: named for its branches' first steps, its branches counted by state; members: every step in it. */
  function fanOut(b, branches) {
    const heads = branches.map((br) => br.head);
    // a child workflow's branch counts the child's own steps too
    const longest = Math.max(...branches.map((br) => br.nodes.length));
    const shape = heads.every((n) => n.group) ? " (child workflows)" : longest > 1 ? ` (up to ${longest} steps a branch)` : "";
    return { key: `${b.runId}:${b.position}`, members: branches.flatMap((br) => br.nodes), label: `${fanName(heads)} ${branches.length}`, counts: stateCounts(branches), shape };
  }

  function fanStatus(nodes) {
    for (const st of ["running", "queued", "failed", "stopped"]) if (nodes.some((n) => n.status === st)) return st;
    return "completed";
  }

  function measure(b) {
    if (b.type === "node") {
      const n = b.node;
      if (n.kind === "join") b.m = { w: JS, h: JS };
      else if (n.group) {
        const inner = measure(n.group.body);
        b.m = { w: Math.max(inner.w + 2 * PAD, NW), h: HEAD + PAD + Math.max(inner.h, 8) + PAD };
      } else b.m = { w: NW, h: NH };
    } else if (b.type === "seq") {
      let w = 0, hh = 0;
      b.items.forEach((it, i) => { const m = measure(it); w += m.w + (i ? HG : 0); hh = Math.max(hh, m.h); });
      b.m = { w, h: hh };
    } else {
      const branches = fanBranches(b);
      b.fan = branches && branches.length >= FANOUT_MIN ? fanOut(b, branches) : null;
      if (b.fan && !open.has(b.fan.key)) {
        b.m = { w: FW, h: FH };
        return b.m;
      }
      let w = 0, hh = 0;
      b.branches.forEach((br, i) => { const m = measure(br); w = Math.max(w, m.w); hh += m.h + (i ? VG : 0); });
      // an open fan-out's frame is as wide as its header needs (about 6.6 px a character at 11.5 px)
      const head = b.fan ? `▾ ${b.fan.label}: ${b.fan.counts}`.length * 6.6 + 16 : 0;
      b.m = b.fan ? { w: Math.max(w + 2 * PAD, FW, head), h: HEAD + PAD + hh + PAD } : { w, h: hh };
    }
    return b.m;
  }

  function place(b, x, y, pos, groups) {
    if (b.type === "node") {
      const n = b.node;
      pos.set(n.id, { x, y, w: b.m.w, h: b.m.h, node: n });
      if (n.group) {
        groups.push({ x, y, w: b.m.w, h: b.m.h, node: n });
        const body = n.group.body;
        place(body, x + (b.m.w - body.m.w) / 2, y + HEAD + PAD + (b.m.h - HEAD - 2 * PAD - body.m.h) / 2, pos, groups);
      }
    } else if (b.type === "seq") {
      let cx = x;
      for (const it of b.items) { place(it, cx, y + (b.m.h - it.m.h) / 2, pos, groups); cx += it.m.w + HG; }
    } else if (b.fan && !open.has(b.fan.key)) {
      const box = { x, y, w: b.m.w, h: b.m.h, fan: b.fan };
      groups.push(box);
      for (const n of b.fan.members) { pos.set(n.id, { ...box, node: n, hidden: true, fan: b.fan }); closedFans.set(n.id, b.fan); }
    } else {
      if (b.fan) groups.push({ x, y, w: b.m.w, h: b.m.h, fan: b.fan, opened: true });
      const inner = b.fan ? { x: x + PAD, y: y + HEAD + PAD } : { x, y };
      let cy = inner.y;
      for (const br of b.branches) { place(br, inner.x, cy, pos, groups); cy += br.m.h + VG; }
    }
  }

  function toggleFan(f, onToggle) {
    if (open.has(f.key)) open.delete(f.key); else open.add(f.key);
    onToggle();
  }

  function fanOutSvg(g, onToggle) {
    const f = g.fan;
    const toggle = () => toggleFan(f, onToggle);
    const title = `${f.label}${f.shape}: ${f.counts}`;
    if (g.opened) {
      return s("g", { class: "fanout open", "data-key": f.key, "data-label": f.label, "data-counts": f.counts },
        s("rect", { x: g.x, y: g.y, width: g.w, height: g.h, rx: 8 }),
        s("text", { class: "fan-head", x: g.x + 8, y: g.y + 15, tabindex: 0, onclick: toggle, onkeydown: (ev) => { if (ev.key === "Enter") toggle(); }, text: `▾ ${title}` }),
        s("title", { text: `${title} (click the header to close)` }));
    }
    return s("g", { class: `fanout node n-${fanStatus(f.members)}`, "data-key": f.key, "data-label": f.label, "data-counts": f.counts, tabindex: 0,
      onclick: toggle, onkeydown: (ev) => { if (ev.key === "Enter") toggle(); } },
      s("rect", { x: g.x, y: g.y, width: g.w, height: g.h, rx: 6 }),
      s("text", { x: g.x + 8, y: g.y + 17, text: clip(`▸ ${f.label}`, 28) }),
      s("text", { class: "sub", x: g.x + 8, y: g.y + 33, text: clip(f.counts, 32) }),
      s("title", { text: `${title} (click to show each stage)` }));
  }

  /** The graph as an SVG element; `selected` is a node id, `onSelect(id)` is called on clicks, `onToggle()` when a fan-out opens or closes. */
  function graphSvg(graph, selected, onSelect, onToggle) {
    const select = onSelect;
    const m = measure(graph.root);
    closedFans = new Map();
    const pos = new Map();
    const groups = [];
    const M = 12;
    place(graph.root, M, M, pos, groups);
    const W = Math.max(m.w + 2 * M, 200), H = Math.max(m.h + 2 * M, 60);
    const svg = s("svg", { class: "graph", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "stage graph" });
    for (const g of groups) {
      if (g.fan) { svg.append(fanOutSvg(g, onToggle)); continue; }
      const n = g.node;
      svg.append(s("g", { class: `group node n-${n.status}`, "data-id": n.id, onclick: () => select(n.id) },
        s("rect", { x: g.x, y: g.y, width: g.w, height: g.h, rx: 8 }),
        s("text", { x: g.x + 8, y: g.y + 15, text: clip(`${n.name} · ${n.group.workflow}`, Math.floor(g.w / 7)) }),
        s("title", { text: `child workflow ${n.group.workflow} (${n.group.runId}): ${n.group.status}` })));
    }
    const edges = s("g", {});
    const drawn = new Set();
    for (const e of graph.edges) {
      const a = pos.get(e.from), b = pos.get(e.to);
      if (!a || !b || (a.fan && a.fan === b.fan)) continue; // inside one closed fan-out: not drawn
      const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
      const key = `${x1},${y1},${x2},${y2}`;
      if (drawn.has(key)) continue; // the stages of a closed fan-out share one box
      drawn.add(key);
      const dx = Math.max(12, (x2 - x1) / 2);
      edges.append(s("path", { class: "edge", d: `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}` }));
    }
    svg.append(edges);
    for (const p of pos.values()) {
      const n = p.node;
      if (n.group || p.hidden) continue;
      if (n.kind === "join") {
        svg.append(s("circle", { class: `j-${n.status}`, cx: p.x + JS / 2, cy: p.y + JS / 2, r: JS / 2 - 1, "stroke-width": 1.5 }));
        continue;
      }
      const took = n.startedAt ? fmtDuration((n.endedAt || Date.now()) - n.startedAt) : "";
      const sub = [n.kind === "stage" ? "" : n.kind, n.status, took, n.attempts > 1 ? `×${n.attempts}` : ""].filter(Boolean).join(" · ");
      svg.append(s("g", { class: `node n-${n.status} k-${n.kind}${selected === n.id ? " sel" : ""}`, "data-id": n.id, "data-name": n.name, "data-status": n.status, tabindex: 0,
        onclick: () => select(n.id), onkeydown: (ev) => { if (ev.key === "Enter") select(n.id); } },
        s("rect", { x: p.x, y: p.y, width: p.w, height: p.h, rx: 6 }),
        s("text", { x: p.x + 8, y: p.y + 16, text: clip(n.name, 21) }),
        s("text", { class: "sub", x: p.x + 8, y: p.y + 31, text: clip(sub, 26) }),
        s("title", { text: `${n.kind} ${n.name} (#${n.position}): ${n.status}` })));
    }
    return svg;
  }

  function legend() {
    return h("div", { class: "legend" }, ["completed", "running", "failed", "stopped"].map(badge));
  }

  // -------------------------------------------------------- timeline

  /** Fills `gantt` with one row per step (tools left out; a closed fan-out's stages one row) and a bar per attempt; `onToggle()` when a fan-out's row opens it. */
  function renderTimeline(gantt, run, index, selected, onSelect, onToggle) {
    const select = onSelect;
    const rows = [];
    const fans = new Map();
    for (const [id, e] of index) {
      if (e.step.kind === "tool") continue;
      const fan = closedFans.get(id);
      if (!fan) { rows.push({ id, ...e }); continue; }
      let row = fans.get(fan.key);
      if (!row) {
        row = { id: fan.key, fan, depth: e.depth, steps: [] };
        fans.set(fan.key, row);
        rows.push(row);
      }
      row.steps.push(e.step);
    }
    const now = Date.now();
    // A bar never starts before the axis (a worker host's clock may run a little behind).
    let t0 = run.createdAt;
    let t1 = run.endedAt || (live(run.status) ? now : run.updatedAt);
    for (const r of rows) for (const [a, b] of rowBars(r, now)) { t0 = Math.min(t0, a); t1 = Math.max(t1, b); }
    const span = Math.max(1, t1 - t0);
    fill(gantt, h("div", { class: "axis" }, [0, 0.25, 0.5, 0.75, 1].map((f) => h("span", { text: fmtDuration(span * f) }))));
    const rowEl = (r, sel) => {
      const track = h("div", { class: "track" });
      if (r.fan) {
        for (const [a, b, status] of rowBars(r, now)) track.append(placed(h("div", { class: `bar b-${status}`, title: `${r.fan.label}: ${r.fan.counts}, ${fmtDuration(b - a)} from the first start to the last end` }), a, b, t0, span));
        const label = h("div", { class: "label", title: `${r.fan.label}${r.fan.shape}: ${r.fan.counts} (click to show each branch)`, text: `▸ ${r.fan.label}: ${r.fan.counts}` });
        label.style.paddingLeft = `${r.depth * 12}px`;
        return h("div", { class: "row fan", "data-key": r.fan.key, "data-label": r.fan.label, onclick: () => toggleFan(r.fan, onToggle) }, label, track);
      }
      // A fork's reused step ran in the run it came from, before this one: no bar, a note instead.
      if (r.step.reusedFrom) track.append(h("span", { class: "reused muted", text: "reused", title: `its result was copied from run ${r.step.reusedFrom}` }));
      for (const [a, b, status, label, attempt] of bars(r.step, now)) {
        const queued = status === "queued";
        const bar = h("div", { class: queued ? "bar queued" : `bar b-${status}`, "data-attempt": attempt, "data-state": status,
          title: queued ? `${r.path} ${label}: queued (waiting for admission or a worker) ${fmtDuration(b - a)}` : `${r.path} ${label}: ${status}, ran ${fmtDuration(b - a)}` });
        track.append(placed(bar, a, b, t0, span));
      }
      const label = h("div", { class: "label", title: r.path, text: `${r.step.kind === "child" ? "▸ " : ""}${r.step.name}` });
      label.style.paddingLeft = `${r.depth * 12}px`;
      return h("div", { class: `row${sel ? " sel" : ""}`, "data-id": r.id, "data-name": r.step.name, onclick: () => select(r.id) }, label, track);
    };
    if (rows.length === 0) gantt.append(h("p", { class: "muted", text: "No stage has started yet." }));
    if (rows.length <= ROWS_ALL) {
      frames.delete(gantt);
      for (const r of rows) gantt.append(rowEl(r, selected === r.id));
    } else {
      gantt.append(...scrollingRows(gantt, rows, rowEl, selected));
    }
  }

  /**
   * More rows than ROWS_ALL: a frame that scrolls, holding a body as tall as every row, with only the rows in view
   * (and OVERSCAN more each side) drawn, each at its place; redrawn as the frame scrolls. The frame keeps its scroll
   * position across re-renders; a row selected (here or on the graph: revealRow) out of view is scrolled to.
   */
  function scrollingRows(gantt, rows, rowEl, selected) {
    const kept = frames.get(gantt) || { scrollTop: 0, selected: null };
    frames.set(gantt, kept);
    const frame = h("div", { class: "rows-frame", "data-rows": rows.length, tabindex: 0, "aria-label": `${rows.length} timeline rows; scroll to see each` });
    const body = h("div", { class: "rows-body" });
    body.style.height = `${rows.length * ROW_H}px`;
    const note = h("p", { class: "muted rows-note", text: `${rows.length} rows: the list scrolls (${ROWS_ALL} or fewer are all shown at once)` });
    frame.append(body);
    let drawn = "";
    const draw = () => {
      const view = frame.clientHeight || FRAME_H;
      const first = Math.max(0, Math.floor(frame.scrollTop / ROW_H) - OVERSCAN);
      const last = Math.min(rows.length, Math.ceil((frame.scrollTop + view) / ROW_H) + OVERSCAN);
      if (drawn === `${first}-${last}`) return;
      drawn = `${first}-${last}`;
      fill(body, rows.slice(first, last).map((r, i) => {
        const el = rowEl(r, kept.selected === r.id);
        el.style.top = `${(first + i) * ROW_H}px`;
        return el;
      }));
    };
    /** Scrolls a row that is out of view to the middle of the frame. */
    const reveal = (id) => {
      kept.selected = id;
      const at = rows.findIndex((r) => r.id === id);
      const top = at * ROW_H, view = frame.clientHeight || FRAME_H;
      if (at >= 0 && (top < frame.scrollTop || top + ROW_H > frame.scrollTop + view)) frame.scrollTop = Math.max(0, top - view / 2);
      kept.scrollTop = frame.scrollTop;
      drawn = "";
      draw();
    };
    kept.reveal = reveal;
    frame.addEventListener("scroll", () => { kept.scrollTop = frame.scrollTop; draw(); }, { passive: true });
    // after the frame is in the page: the scroll position it had before this render, a new selection shown
    queueMicrotask(() => {
      frame.scrollTop = kept.scrollTop;
      if (selected !== kept.selected) reveal(selected);
      else { drawn = ""; draw(); }
    });
    draw();
    return [frame, note];
  }

  /** A step selected on the graph: its timeline row, when the timeline scrolls in a frame, is drawn and scrolled into view. */
  function revealRow(gantt, id) {
    const kept = frames.get(gantt);
    if (kept) kept.reveal(id);
  }

  /** `bar` placed on the axis from `a` to `b`; a bar at its smallest (0.4% or 2 px) near the end keeps inside the track. */
  function placed(bar, a, b, t0, span) {
    const width = Math.max(0.4, ((b - a) / span) * 100);
    bar.style.left = `min(${((a - t0) / span) * 100}%, calc(100% - max(${width}%, 2px)))`;
    bar.style.width = `${width}%`;
    return bar;
  }

  /** A row's bars: a step's (bars), or a closed fan-out's one bar from its first start to its last end, in the fan-out's state. */
  function rowBars(r, now) {
    if (!r.fan) return bars(r.step, now);
    const all = r.steps.flatMap((st) => bars(st, now));
    if (all.length === 0) return [];
    return [[Math.min(...all.map((x) => x[0])), Math.max(...all.map((x) => x[1])), fanStatus(r.fan.members), r.fan.label, 1]];
  }

  /** [from, to, state, label, attempt] per bar: each attempt's queued time (if any), then its running time. */
  function bars(step, now) {
    const list = [];
    if (step.reusedFrom) return list;
    if (step.attemptLog && step.attemptLog.length) {
      for (const a of step.attemptLog) {
        if (a.queuedAt && a.queuedAt < a.startedAt) list.push([a.queuedAt, a.startedAt, "queued", `attempt ${a.attempt}`, a.attempt]);
        list.push([a.startedAt, a.endedAt || now, a.status, `attempt ${a.attempt}`, a.attempt]);
      }
    } else if (step.startedAt) list.push([step.startedAt, step.wakeAt || step.endedAt || now, step.status, step.kind, 1]);
    return list.map(([a, b, st, l, n]) => [a, Math.max(a, b), st, l, n]);
  }

  window.atomic.views = { graphSvg, renderTimeline, revealRow, legend, countsText };
})();

// atomic status page: the review of a stage's diff (a stage with a git
// worktree; docs/guides/worktrees.md#review), on the run page under
// ?diff=<stage>: the files it changed, its diff with each line's code
// coloured by the server (GET .../stages/<stage>/diff; the HTML is
// highlight.js's, escaped there), a comment on any added or unchanged line
// (kept here as a draft until sent; an open box keeps its text when the diff
// is drawn again), and, while a workflow waits on
// ctx.review for the stage, "Approve" and "Request changes", which answer
// that review as `atomic review` does (POST .../stages/<stage>/review).
// A refusal (an empty comment, a line the diff does not show, no review
// open any more) is said in one sentence under the buttons.
"use strict";
(() => {
  const { h, fill, clear, api } = window.atomic;

  const post = (url, body) => api(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json" }, body: JSON.stringify(body) });
  const problemText = (err) => `${err.message}${err.hint ? `\nhint: ${err.hint}` : ""}`;

  function createReview(runId, refresh) {
    const root = h("div", { class: "card review", id: "diff-view", hidden: true });
    let stage = null;
    let view = null;
    let key = "";
    let loading = false;
    let again = false;
    /** Draft comments: `${file}:${line}` (or "" for the whole change) → text. */
    const drafts = new Map();
    /** Comment boxes open and not yet added: `${file}:${line}` → the text typed so far. */
    const open = new Map();
    const problem = h("p", { class: "error", id: "review-problem", role: "alert", hidden: true });
    const outcome = h("p", { class: "muted", id: "review-result", role: "status" });
    const overall = h("textarea", { id: "review-overall", rows: 2, placeholder: "a comment on the whole change (optional)", "aria-label": "comment on the whole change" });
    const approve = h("button", { class: "btn", id: "review-approve", type: "button", text: "Approve", onclick: () => send({ approve: true }) });
    const changes = h("button", { class: "btn danger", id: "review-request", type: "button", text: "Request changes", onclick: () => send({ comments: comments() }) });

    function say(err) {
      problem.hidden = !err;
      problem.textContent = err ? problemText(err) : "";
    }

    function comments() {
      const list = [];
      for (const [where, text] of drafts) {
        const [file, line] = where.split(/:(?=\d+$)/);
        list.push({ file, line: Number(line), text });
      }
      if (overall.value.trim()) list.push({ text: overall.value });
      return list;
    }

    async function send(body) {
      approve.disabled = changes.disabled = true;
      say(null);
      try {
        await post(`/api/runs/${runId}/stages/${encodeURIComponent(stage)}/review`, body);
        outcome.textContent = body.approve ? "approved" : `changes requested (${body.comments.length} comment${body.comments.length === 1 ? "" : "s"})`;
        drafts.clear();
        overall.value = "";
        key = "";
        refresh();
      } catch (err) {
        say(err);
      } finally {
        approve.disabled = changes.disabled = false;
      }
    }

    /** The comment box under a line: Add keeps it as a draft, Cancel drops it. */
    function commentBox(row, file, line) {
      const where = `${file}:${line}`;
      const next = row.nextElementSibling;
      if (next && next.classList.contains("comment-row")) { next.querySelector("textarea").focus(); return; }
      if (next && next.classList.contains("draft-row")) next.remove();
      open.set(where, drafts.get(where) || "");
      const tr = commentRow(row, where);
      row.after(tr);
      tr.querySelector("textarea").focus();
    }

    /** An open comment box; its text lives in `open`, so a re-render of the diff keeps what was typed. */
    function commentRow(row, where) {
      const text = h("textarea", { class: "comment-text", rows: 2, placeholder: `comment on ${where}`, "aria-label": `comment on ${where}`, oninput: () => open.set(where, text.value) });
      text.value = open.get(where) || "";
      const note = h("span", { class: "comment-problem", role: "alert" });
      const tr = h("tr", { class: "comment-row", "data-line": where },
        h("td", { colspan: 3 },
          text,
          h("div", { class: "comment-actions" },
            h("button", { class: "btn comment-add", type: "button", text: drafts.has(where) ? "Update comment" : "Add comment", onclick: () => {
              if (!text.value.trim()) { note.textContent = `the comment on ${where} is empty: write what should change there`; return; }
              drafts.set(where, text.value.trim());
              open.delete(where);
              showDrafts();
              tr.replaceWith(draftRow(where));
            } }),
            h("button", { class: "btn comment-cancel", type: "button", text: "Cancel", onclick: () => { open.delete(where); tr.remove(); if (drafts.has(where)) row.after(draftRow(where)); } }),
            note)));
      return tr;
    }

    /** A draft comment, shown under its line. */
    function draftRow(where) {
      return h("tr", { class: "draft-row", "data-line": where },
        h("td", { colspan: 3 },
          h("div", { class: "draft" }, h("b", { text: where }), " ", h("span", { class: "draft-text", text: drafts.get(where) }), " ",
            h("button", { class: "btn draft-remove", type: "button", text: "Remove", onclick: (ev) => { drafts.delete(where); ev.target.closest("tr").remove(); showDrafts(); } }))));
    }

    function showDrafts() {
      changes.textContent = drafts.size ? `Request changes (${drafts.size} comment${drafts.size === 1 ? "" : "s"})` : "Request changes";
    }

    function fileBlock(f, i) {
      const rows = [];
      for (const hunk of f.hunks) {
        rows.push(h("tr", { class: "hunk" }, h("td", { colspan: 3, class: "mono", text: hunk.header })));
        for (const l of hunk.lines) {
          const code = h("td", { class: "code mono" });
          code.innerHTML = l.html; // highlight.js's output, escaped by the server
          const row = h("tr", { class: `line ${l.kind}`, "data-file": f.path, "data-new": l.new, "data-old": l.old },
            h("td", { class: "ln mono", text: l.old === undefined ? "" : String(l.old) }),
            h("td", { class: "ln mono" }, l.new === undefined ? "" : h("button", { class: "add-comment", type: "button", title: `comment on ${f.path}:${l.new}`, "aria-label": `comment on ${f.path}:${l.new}`, text: String(l.new), onclick: () => commentBox(row, f.path, l.new) })),
            code);
          rows.push(row);
          const where = `${f.path}:${l.new}`;
          if (l.new !== undefined && open.has(where)) rows.push(commentRow(row, where));
          else if (l.new !== undefined && drafts.has(where)) rows.push(draftRow(where));
        }
      }
      return h("div", { class: "diff-file", id: `diff-file-${i}`, "data-path": f.path },
        h("h3", { class: "mono" }, f.from ? `${f.from} → ${f.path}` : f.path, " ", h("span", { class: "muted", text: `${f.status}, +${f.additions} −${f.deletions}` })),
        h("table", { class: "diff" }, h("tbody", {}, rows)));
    }

    function render() {
      const reviewing = view.review !== null;
      const typing = root.contains(document.activeElement) ? document.activeElement.closest("tr.comment-row")?.dataset.line : undefined;
      fill(root,
        h("div", { class: "review-head" },
          h("h2", {}, "Diff of ", h("span", { class: "mono", id: "diff-stage", text: stage })),
          h("a", { href: location.pathname, class: "muted", id: "diff-close", text: "close", onclick: (ev) => { ev.preventDefault(); show(null); } })),
        h("p", { class: "muted" }, `branch `, h("span", { class: "mono", text: view.branch }), ` against `, h("span", { class: "mono", text: view.baseCommit.slice(0, 12) }),
          view.live ? " (the worktree as it is now)" : " (the branch; its worktree was removed)"),
        h("p", { id: "review-state", class: reviewing ? "notice" : "muted", text: reviewing ? "The run waits for your review of this diff." : "No review of this stage is open." }),
        view.files.length === 0 ? h("p", { class: "muted", text: "No changes against the base." }) :
          h("ul", { class: "diff-files", id: "diff-files" }, view.files.map((f, i) => h("li", {}, h("a", { href: `#diff-file-${i}`, class: "mono", text: f.path }), " ", h("span", { class: "muted", text: `${f.status} +${f.additions} −${f.deletions}` })))),
        view.truncated ? h("p", { class: "notice", text: `The diff is too long to show whole: see it with atomic diff ${runId} ${stage}` }) : null,
        view.files.map(fileBlock),
        reviewing ? h("div", { class: "review-actions" }, overall, h("div", { class: "send-row" }, approve, changes, outcome), problem) : h("div", {}, outcome, problem));
      showDrafts();
      if (typing !== undefined) [...root.querySelectorAll("tr.comment-row")].find((tr) => tr.dataset.line === typing)?.querySelector("textarea").focus();
    }

    async function load() {
      if (!stage) return;
      if (loading) { again = true; return; }
      loading = true;
      try {
        view = await api(`/api/runs/${runId}/stages/${encodeURIComponent(stage)}/diff`);
        render();
      } catch (err) {
        fill(root, h("h2", { text: `Diff of ${stage}` }), h("p", { class: "error", id: "diff-problem", text: problemText(err) }));
      } finally {
        loading = false;
        if (again) { again = false; load(); }
      }
    }

    /** Shows a stage's diff (null: none), the address keeping it (?diff=<stage>). */
    function show(name) {
      if (name === stage) return;
      stage = name;
      drafts.clear();
      open.clear();
      key = "";
      const url = new URL(location.href);
      if (name) url.searchParams.set("diff", name); else url.searchParams.delete("diff");
      history.replaceState(null, "", url);
      root.hidden = !name;
      if (!name) { clear(root); return; }
      fill(root, h("p", { class: "muted", text: "Loading the diff…" }));
      load();
    }

    /** On every render of the run: the diff is read again when its stage moved on or a review opened or closed. */
    function update(detail) {
      if (!stage) return;
      const questions = (detail.report.questions || []).map((q) => q.id).join(",");
      const ended = detail.report.steps.filter((s) => s.endedAt).length;
      const next = `${detail.run.status}|${questions}|${ended}|${detail.report.steps.length}`;
      if (next === key) return;
      key = next;
      load();
    }

    const asked = new URLSearchParams(location.search).get("diff");
    if (asked) show(asked);
    return { element: root, show, update };
  }

  window.atomic.review = { createReview };
})();

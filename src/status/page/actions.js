// atomic status page, part 3: what a run page can do besides looking, the
// same as the API (and the CLI) can:
//
// - answer a question a stage asked with ctx.ask (POST .../answers): its
//   choices as buttons; a question without choices gets a text box (one
//   with choices accepts nothing else, so no box is offered there);
// - send a message to a stage (POST .../messages): stage path (a datalist
//   of the run's stages; a pattern like review/* works too), text, mode,
//   files to attach (sent as base64 in the JSON, as `atomic send --attach`);
// - for a crashed or interrupted run, the `atomic resume <id>` command to
//   copy (the Resume button of operate.js has the service drive it instead).
//
// Pause, unpause and cancel are the head's buttons (app.js). The page is
// re-rendered on every journal event: these forms are made once and only
// updated, so what someone is typing survives the run moving on.
"use strict";
(() => {
  const { h, fill, api } = window.atomic;

  const post = (url, body) => api(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json" }, body: JSON.stringify(body) });

  /** Open questions of the run and of its child runs, with the run that holds each. */
  function questionsOf(report, out = []) {
    for (const q of report.questions || []) out.push({ ...q, runId: report.run.id });
    for (const step of report.steps) if (step.child) questionsOf(step.child, out);
    return out;
  }

  function stagePaths(report, prefix = "", out = []) {
    for (const step of report.steps) {
      const path = prefix ? `${prefix}/${step.name}` : step.name;
      if (step.kind === "stage") out.push(path);
      if (step.child) stagePaths(step.child, path, out);
    }
    return out;
  }

  /** The stage (its path) whose diff a review question is about: the one whose branch the question names. */
  function reviewedStage(report, question, prefix = "") {
    for (const step of report.steps) {
      const path = prefix ? `${prefix}/${step.name}` : step.name;
      if (step.workspace && question.startsWith(`Review the diff of branch ${step.workspace.branch}:`)) return path;
      const inner = step.child ? reviewedStage(step.child, question, path) : null;
      if (inner) return inner;
    }
    return null;
  }

  function createActions(runId, refresh, openDiff) {
    const questions = h("div", { id: "questions" });
    const cards = new Map();
    const resume = h("div", { id: "resume", hidden: true });
    const stages = h("datalist", { id: "msg-stages" });
    const stage = h("input", { id: "msg-stage", list: "msg-stages", placeholder: "stage path, e.g. review/security or review/*", required: true, "aria-label": "stage", autocomplete: "off" });
    const text = h("textarea", { id: "msg-text", rows: 2, placeholder: "message text", required: true, "aria-label": "message" });
    const mode = h("select", { id: "msg-mode", "aria-label": "delivery mode" },
      h("option", { value: "steer", text: "steer (into the current turn)" }),
      h("option", { value: "followUp", text: "followUp (after the answer)" }),
      h("option", { value: "interrupt", text: "interrupt (stop the turn, then deliver)" }));
    const files = h("input", { id: "msg-files", type: "file", multiple: true, "aria-label": "attach files" });
    const result = h("p", { id: "msg-result", class: "muted", role: "status" });
    const send = h("button", { class: "btn", id: "msg-send", type: "submit", text: "Send" });
    const form = h("form", { id: "send-form", class: "card send", hidden: true, onsubmit: (ev) => { ev.preventDefault(); sendMessage(); } },
      h("h2", { text: "Message a stage" }), h("div", { class: "send-row" }, stage, mode), text,
      h("label", { class: "send-files muted" }, "attach files ", files), h("div", { class: "send-row" }, send, result), stages);

    /** A file's bytes in base64 (the API's `attachments: [{ name, data }]`). */
    async function base64Of(file) {
      const bytes = new Uint8Array(await file.arrayBuffer());
      let binary = "";
      for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
      return btoa(binary);
    }
    const root = h("div", { class: "actions" }, questions, resume, form);

    async function sendMessage() {
      send.disabled = true;
      result.className = "muted";
      result.textContent = "sending…";
      try {
        const chosen = Array.from(files.files || []);
        const attachments = await Promise.all(chosen.map(async (f) => ({ name: f.name, data: await base64Of(f) })));
        const r = await post(`/api/runs/${runId}/messages`, { stage: stage.value.trim(), text: text.value, mode: mode.value, ...(attachments.length ? { attachments } : {}) });
        const where = r.deliveries.map((d) => `${d.stage} (${d.state}${d.state === "queued" && !d.started ? ", before it starts" : ""})`).join(", ");
        result.textContent = `sent to ${where || r.target}${chosen.length ? `, with ${chosen.map((f) => f.name).join(", ")} attached` : ""}`;
        text.value = "";
        files.value = "";
        refresh();
      } catch (err) {
        result.className = "error";
        result.textContent = `${err.message}${err.hint ? `\nhint: ${err.hint}` : ""}`;
      } finally {
        send.disabled = false;
      }
    }

    function questionCard(q, reviewed) {
      const problem = h("p", { class: "error", hidden: true });
      const answer = async (value, buttons) => {
        for (const b of buttons) b.disabled = true;
        try {
          await post(`/api/runs/${q.runId}/answers`, { question: q.id, answer: value });
          card.classList.add("answered");
          fill(problem);
          problem.hidden = true;
          refresh();
        } catch (err) {
          problem.hidden = false;
          problem.textContent = `${err.message}${err.hint ? `\nhint: ${err.hint}` : ""}`;
          for (const b of buttons) b.disabled = false;
        }
      };
      let controls;
      if (q.choices && q.choices.length) {
        const buttons = q.choices.map((c) => h("button", { class: "btn choice", type: "button", "data-choice": c, text: c, onclick: () => answer(c, buttons) }));
        controls = h("div", { class: "choices" }, buttons);
      } else {
        const box = h("textarea", { class: "answer-text", rows: 2, placeholder: "your answer", "aria-label": "answer" });
        const go = h("button", { class: "btn answer-send", type: "submit", text: "Answer" });
        controls = h("form", { class: "answer-form", onsubmit: (ev) => { ev.preventDefault(); if (box.value.trim()) answer(box.value, [go]); } }, box, go);
      }
      const card = h("div", { class: "card question", "data-question": q.id },
        h("h2", { text: "The run asks" }),
        h("p", { class: "question-text", text: q.question }),
        q.deadline ? h("p", { class: "muted", text: `unanswered, it times out at ${new Date(q.deadline).toLocaleTimeString()}` }) : null,
        reviewed ? h("p", {}, h("button", { class: "btn review-open", type: "button", "data-stage": reviewed, text: `Review the diff of ${reviewed}`, onclick: () => openDiff(reviewed) })) : null,
        controls, problem,
        h("p", { class: "muted", text: `or: atomic answer ${q.runId} ${q.id} "…"` }));
      return card;
    }

    function update(detail) {
      const run = detail.run;
      const live = run.status === "running" || run.status === "paused" || run.status === "awaiting_input";
      // A run that ended (cancelled, failed) leaves its questions open in the journal: nobody is asking any more.
      const open = live ? questionsOf(detail.report) : [];
      const ids = new Set(open.map((q) => q.id));
      for (const [id, card] of cards) if (!ids.has(id)) { card.remove(); cards.delete(id); }
      for (const q of open) if (!cards.has(q.id)) { const c = questionCard(q, reviewedStage(detail.report, q.question)); cards.set(q.id, c); questions.append(c); }

      form.hidden = !live;
      if (live) {
        const paths = stagePaths(detail.report);
        if (stages.childElementCount !== paths.length) fill(stages, paths.map((p) => h("option", { value: p })));
      }

      const resumable = run.status === "crashed" || run.status === "interrupted";
      resume.hidden = !resumable;
      if (resumable && resume.dataset.for !== run.status) {
        resume.dataset.for = run.status;
        const command = `atomic resume ${run.rootId}`;
        const code = h("code", { id: "resume-cmd", class: "mono", text: command });
        const copied = h("span", { class: "muted", role: "status" });
        const copy = h("button", { class: "btn", id: "btn-copy-resume", type: "button", text: "Copy", onclick: () => copyText(code, command, copied) });
        fill(resume, h("div", { class: "notice resume" },
          h("p", { text: run.status === "crashed" ? "Nobody drives this run any more (its process is gone). Continue it from where it stopped with:" : "This run was interrupted. Continue it from where it stopped with:" }),
          h("div", { class: "resume-row" }, code, copy, copied)));
      }
    }

    return { element: root, update };
  }

  /** Copies to the clipboard; where the Clipboard API is refused, selects the text for Ctrl-C. */
  async function copyText(el, text, status) {
    try {
      await navigator.clipboard.writeText(text);
      status.textContent = "copied";
    } catch {
      const range = document.createRange();
      range.selectNodeContents(el);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      status.textContent = "selected: press Ctrl-C to copy";
    }
  }

  window.atomic.actions = { createActions };
})();

// atomic status page, part 4 (after actions.js): the console's actions that
// start runs, the same as the API and the CLI (service/operator.ts behind
// both):
//
// - on the run list: a start form (a builtin or registered workflow, a field
//   per input from its schema, an optional run id for an idempotent start),
//   and bulk Cancel and Resume over the selected runs, after a confirmation
//   that names the count;
// - on a run page: Resume (a stopped run), Rerun (its inputs, editable as
//   JSON), Fork from the selected step.
//
// A refusal is shown inline, as the server sends it: the CLI's sentence and
// hint. Starting needs the service (atomic serve); a server without one
// answers that it does not start runs, and that is what the page shows.
"use strict";
(() => {
  const { h, fill, api } = window.atomic;

  const post = (url, body) => api(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json" }, body: JSON.stringify(body) });
  const problemText = (err) => `${err.message}${err.hint ? `\nhint: ${err.hint}` : ""}`;
  const go = (runId) => { location.href = `/runs/${runId}`; };

  // ------------------------------------------------------------ start form

  /** A form control for one input (engine/inputs.ts describeInputs: name, type, required, default, range, description). */
  function inputField(input) {
    const id = `start-input-${input.name}`;
    const choices = /^".*"( \| ".*")*$/.test(input.type) ? input.type.split(" | ").map((c) => JSON.parse(c)) : null;
    let control;
    if (choices) {
      control = h("select", { id }, input.required ? null : h("option", { value: "", text: "(default)" }), choices.map((c) => h("option", { value: c, text: c })));
      if (input.default !== undefined) control.value = String(input.default);
    } else if (input.type === "boolean") {
      control = h("input", { id, type: "checkbox" });
      control.checked = input.default === true;
    } else {
      const multi = input.type === "array" || input.type === "object";
      control = h(multi ? "textarea" : "input", { id, rows: 2, placeholder: multi ? "JSON" : input.default !== undefined ? String(input.default) : "" });
    }
    control.dataset.input = input.name;
    control.dataset.type = choices ? "choice" : input.type;
    const note = [input.type, input.required ? "required" : "optional", input.range, input.description].filter(Boolean).join(" · ");
    return h("label", { class: "field" }, h("span", { class: "field-name mono", text: input.name }), control, h("span", { class: "muted", text: note }));
  }

  /** The inputs as typed (numbers as numbers, JSON for arrays and objects); a field left empty is left out. */
  function readInputs(fields) {
    const inputs = {};
    for (const el of fields.querySelectorAll("[data-input]")) {
      const name = el.dataset.input;
      const type = el.dataset.type;
      if (type === "boolean") { inputs[name] = el.checked; continue; }
      const raw = el.value;
      if (raw.trim() === "") continue;
      if (type === "number") inputs[name] = Number(raw);
      else if (type === "array" || type === "object") {
        try { inputs[name] = JSON.parse(raw); } catch { throw Object.assign(new Error(`input "${name}" is not JSON`), { hint: 'for example ["a", "b"]' }); }
      } else inputs[name] = raw;
    }
    return inputs;
  }

  function startForm() {
    const select = h("select", { id: "start-workflow", "aria-label": "workflow" });
    const about = h("p", { class: "muted", id: "start-about" });
    const fields = h("div", { id: "start-fields", class: "fields" });
    const key = h("input", { id: "start-id", placeholder: "optional: your own run id (a second start with it gets the same run)", "aria-label": "run id" });
    const result = h("p", { id: "start-result", role: "status", hidden: true });
    const submit = h("button", { class: "btn", id: "start-go", type: "submit", text: "Start" });
    const form = h("form", { class: "card start", id: "start-form", hidden: true, onsubmit: (ev) => { ev.preventDefault(); start(); } },
      h("h2", { text: "Start a run" }), select, about, fields, key, h("div", { class: "send-row" }, submit), result);
    let workflows = [];
    const show = () => {
      const w = workflows.find((x) => x.name === select.value);
      about.textContent = w ? (w.error ? `does not load: ${w.error}` : `${w.source}${w.description ? `: ${w.description}` : ""}`) : "";
      fill(fields, w ? w.inputs.map(inputField) : []);
    };
    select.addEventListener("change", show);
    async function open() {
      form.hidden = !form.hidden;
      if (form.hidden || workflows.length) return;
      try {
        workflows = (await api("/api/workflows")).workflows;
        fill(select, workflows.map((w) => h("option", { value: w.name, text: `${w.name} (${w.source})` })));
        show();
      } catch (err) {
        result.hidden = false;
        result.className = "error";
        result.textContent = problemText(err);
      }
    }
    async function start() {
      submit.disabled = true;
      result.hidden = true;
      try {
        const body = { workflow: select.value, inputs: readInputs(fields) };
        if (key.value.trim()) body.id = key.value.trim();
        go((await post("/api/runs", body)).runId);
      } catch (err) {
        result.hidden = false;
        result.className = "error";
        result.textContent = problemText(err);
      } finally {
        submit.disabled = false;
      }
    }
    const button = h("button", { class: "btn", id: "btn-start", type: "button", text: "Start a run…", onclick: open });
    return { button, form };
  }

  // ------------------------------------------------------------ bulk actions

  /**
   * Cancel and Resume over the runs ticked: `picked()` gives `{ runs: [ids] }`, or `{ filter, count }` for every run
   * matching the list's filter (the server lists them again when it acts).
   */
  function bulkBar(picked, done) {
    const result = h("span", { id: "bulk-result", class: "muted", role: "status" });
    const act = async (action, verb) => {
      const chosen = picked();
      const n = chosen.runs ? chosen.runs.length : chosen.count;
      if (n === 0) { result.textContent = "select runs first"; return; }
      if (!confirm(`${verb} ${n} run${n === 1 ? "" : "s"}${chosen.filter !== undefined ? " matching the list" : ""}?`)) return;
      try {
        const r = await post("/api/runs/bulk", chosen.runs ? { action, runs: chosen.runs } : { action, filter: chosen.filter });
        const failed = r.results.filter((x) => !x.ok);
        result.className = failed.length ? "error" : "muted";
        result.textContent = `${action === "cancel" ? "cancelled" : "resumed"} ${r.results.length - failed.length} of ${r.results.length}${failed.map((f) => `\n${f.runId}: ${f.error.message}`).join("")}`;
        done();
      } catch (err) {
        result.className = "error";
        result.textContent = problemText(err);
      }
    };
    return h("div", { class: "bulk", id: "bulk" },
      h("button", { class: "btn danger", id: "bulk-cancel", type: "button", text: "Cancel selected", onclick: () => act("cancel", "Cancel") }),
      h("button", { class: "btn", id: "bulk-resume", type: "button", text: "Resume selected", onclick: () => act("resume", "Resume") }),
      result);
  }

  // ------------------------------------------------------------ a run's page

  /** Resume and Rerun for a run that stopped or ended (root runs only); updated on every render. */
  function runActions(runId) {
    const result = h("p", { id: "run-action-result", role: "status", hidden: true });
    // Who drives it on, once resumed: the service (which resumes it again should that drive stop), or a detached
    // `atomic resume` (a service without recovery; its output file named), as `atomic resume --detach` says.
    const resume = h("button", { class: "btn", id: "btn-resume", type: "button", text: "Resume", hidden: true, onclick: () => act(() => post(`/api/runs/${runId}/resume`, {}), resume, (r) => {
      result.hidden = false;
      result.className = "muted";
      result.textContent = r.drivenBy === "service" ? "resumed: left to the service, which drives it on (and resumes it again should it stop)" : `resumed by a detached atomic resume; its output: ${r.logPath}`;
    }) });
    const inputs = h("textarea", { id: "rerun-inputs", rows: 4, "aria-label": "inputs (JSON)" });
    const rerunGo = h("button", { class: "btn", id: "rerun-go", type: "submit", text: "Start the rerun" });
    const rerunForm = h("form", { id: "rerun-form", class: "rerun", hidden: true, onsubmit: (ev) => { ev.preventDefault(); rerun(); } },
      h("p", { class: "muted", text: "Its inputs (edit to change them):" }), inputs, rerunGo);
    const rerunBtn = h("button", { class: "btn", id: "btn-rerun", type: "button", text: "Rerun…", hidden: true, onclick: () => { rerunForm.hidden = !rerunForm.hidden; } });
    const element = h("div", { class: "run-actions" }, h("div", { class: "controls" }, resume, rerunBtn), rerunForm, result);
    let inputsShown = false;

    async function act(call, button, done) {
      button.disabled = true;
      result.hidden = true;
      try {
        done(await call());
      } catch (err) {
        result.hidden = false;
        result.className = "error";
        result.textContent = problemText(err);
      } finally {
        button.disabled = false;
      }
    }
    function rerun() {
      let parsed;
      try { parsed = JSON.parse(inputs.value || "{}"); } catch {
        result.hidden = false;
        result.className = "error";
        result.textContent = "the inputs are not JSON\nhint: for example {\"topic\": \"durability\"}";
        return;
      }
      act(() => post(`/api/runs/${runId}/rerun`, { inputs: parsed }), rerunGo, (r) => go(r.runId));
    }
    function update(detail) {
      const run = detail.run;
      const root = !run.parentId;
      resume.hidden = !(root && ["crashed", "interrupted", "failed", "blocked"].includes(run.status));
      const ended = !["running", "paused", "awaiting_input"].includes(run.status);
      rerunBtn.hidden = !(root && ended);
      if (!inputsShown && run.inputs !== undefined) { inputs.value = JSON.stringify(run.inputs ?? {}, null, 2); inputsShown = true; }
    }
    return { element, update };
  }

  /** "Fork from here" for a step of the root run that ended: a new run reusing what came before, live at this step. */
  function forkButton(runId, step, runLive) {
    if (runLive || step.status === "running" || step.status === "queued") return null;
    const result = h("span", { id: "fork-result", class: "error", role: "status" });
    const button = h("button", { class: "btn", id: "btn-fork", type: "button", text: "Fork from this step", onclick: async () => {
      if (!confirm(`Start a new run that reuses what came before step #${step.position} (${step.name}) and runs it again?`)) return;
      button.disabled = true;
      try {
        go((await post(`/api/runs/${runId}/fork`, { at: `#${step.position}` })).runId);
      } catch (err) {
        result.textContent = problemText(err);
        button.disabled = false;
      }
    } });
    return h("div", { class: "fork" }, button, result);
  }

  window.atomic.operate = { startForm, bulkBar, runActions, forkButton };
})();

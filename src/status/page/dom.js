// atomic status page, part 1: DOM and formatting helpers, the API
// client, shared by the other scripts as window.atomic. Requests carry the
// session cookie (HttpOnly: no script here sees it or the token).
"use strict";
(() => {

  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
  }
  function s(tag, attrs, ...kids) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    setAttrs(el, attrs);
    append(el, kids);
    return el;
  }
  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  function append(el, kids) {
    for (const k of kids.flat(Infinity)) if (k !== null && k !== undefined && k !== false) el.append(k instanceof Node ? k : String(k));
  }
  function clear(el) {
    while (el.firstChild) el.firstChild.remove();
    return el;
  }
  /** Replaces an element's children (nested arrays flattened, null and false skipped). */
  function fill(el, ...kids) {
    append(clear(el), kids);
    return el;
  }
  function fmtDuration(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "";
    if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
    const sec = ms / 1000;
    if (sec < 60) return `${sec.toFixed(1)}s`;
    const m = Math.floor(sec / 60);
    if (m < 60) return `${m}m${String(Math.floor(sec % 60)).padStart(2, "0")}s`;
    return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
  }
  // Times as the CLI prints them (cli/style.ts formatTime), with the zone said: UTC, the same on every machine.
  function fmtTime(ms) {
    return ms ? `${new Date(ms).toISOString().replace("T", " ").slice(0, 19)} UTC` : "";
  }
  // Money as the CLI prints it (runners/usage.ts formatCost): a small cost keeps its digits, never "$0.0000".
  function fmtCost(micro) {
    const usd = micro / 1e6;
    return usd === 0 ? "$0" : usd < 0.01 ? `$${usd.toFixed(6).replace(/0+$/, "")}` : `$${usd.toFixed(4)}`;
  }
  function fmtTokens(u) {
    const n = u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens;
    return n >= 10000 ? `${(n / 1000).toFixed(1)}k` : String(n);
  }
  function badge(status) {
    return h("span", { class: `badge s-${status}`, text: status });
  }
  function live(status) {
    return status === "running" || status === "paused" || status === "awaiting_input";
  }
  async function api(url, init) {
    const res = await fetch(url, Object.assign({ headers: { accept: "application/json" }, credentials: "same-origin" }, init));
    const body = await res.json().catch(() => null);
    if (!res.ok) {
      const signedOut = res.status === 401;
      const err = new Error(signedOut ? "Not signed in: open the login URL that atomic serve printed." : (body && body.error && body.error.message) || `${res.status} ${res.statusText}`);
      err.status = res.status;
      err.hint = body && body.error && body.error.hint;
      throw err;
    }
    return body;
  }

  /**
   * A host as people read it: the hostname part of a recorded identity
   * ("name/machine/boot/pidns", src/shared/process-info.ts hostLabel), the
   * whole of a --host-id; the full identity on hover.
   */
  function hostName(id, attrs = {}) {
    return h("span", { ...attrs, class: "host", title: `host ${id}`, text: id.split("/")[0] || id });
  }

  function clip(text, n) {
    return text.length > n ? `${text.slice(0, Math.max(1, n - 1))}…` : text;
  }

  window.atomic = { h, s, clear, fill, fmtDuration, fmtTime, fmtCost, fmtTokens, badge, live, api, clip, hostName };
})();

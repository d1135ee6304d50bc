// atomic status page, part 4: an agent stage's transcript drawn as a
// conversation.
//
// The transcript (transcript.md, runners/agent-files.ts) is sections
// "## <heading>" and, inside an assistant's section, tool blocks:
// "**tool NAME** `ARGS`" (or "**tool NAME** (error) `ARGS`") followed by
// the result in a ``` fence. Only the headings the runners write start a
// section ("User", "Assistant", "Message (mode)", "Outcome", "Corrective
// re-prompt N", "Wrap-up …", "(…)" notes, and the first line naming the
// stage): a "## " line the model wrote itself stays part of its text.
// Every runner writes this shape (runners/agent-files.ts); a transcript
// without any "## Assistant" (one a CLI runner wrote before it did, in a
// journal kept from then) cannot be split reliably and is shown as text.
// The CLI runners write a tool block when the call starts and another when
// it ends (`atomic logs --follow` shows a running tool): the second is
// folded into the first here, one collapsible call with its outcome.
//
// Turns: the n-th assistant section is the n-th model call; its tokens and
// cost come from the provider's usage records (the transcript route's
// `turns`, read once the attempt is over), when the provider sent them.
"use strict";
(() => {
  const { h, fmtCost } = window.atomic;

  const SECTION = /^## (User|Assistant|Outcome|Warning|Message \([^)]*\)|Corrective re-prompt \d+|Wrap-up \(.*\)|\(.*\))\s*$/;
  const FIRST = /^## (.+)$/;
  const TOOL = /^\*\*tool (\S+)\*\*( \(error\))? `(.*)`\s*$/;

  function roleOf(heading, first) {
    if (heading === "User" || heading.startsWith("Message (") || heading.startsWith("Corrective re-prompt") || heading.startsWith("Wrap-up")) return "user";
    if (heading === "Assistant") return "assistant";
    if (first && !heading.startsWith("(")) return "header";
    return "note";
  }

  /** The transcript as items: { role, heading, parts: [{ text } | { tool, args, error, result }] }; null when it is not one. */
  function parseTranscript(text) {
    const lines = text.split("\n");
    if (!lines.some((l) => l === "## Assistant")) return null;
    const items = [];
    let cur = null;
    let i = 0;
    const addText = (line) => {
      if (!cur) return;
      const last = cur.parts[cur.parts.length - 1];
      if (last && "text" in last) last.text += `\n${line}`;
      else cur.parts.push({ text: line });
    };
    while (i < lines.length) {
      const line = lines[i];
      const sec = SECTION.exec(line) || (items.length === 0 ? FIRST.exec(line) : null);
      if (sec) {
        cur = { role: roleOf(sec[1], items.length === 0), heading: sec[1], parts: [] };
        items.push(cur);
        i++;
        continue;
      }
      const tool = cur && cur.role === "assistant" ? TOOL.exec(line) : null;
      if (tool && lines[i + 1] === "" && lines[i + 2] === "```") {
        let j = i + 3;
        const result = [];
        while (j < lines.length && lines[j] !== "```") result.push(lines[j++]);
        // the part before, blank lines between the blocks aside
        let k = cur.parts.length - 1;
        while (k >= 0 && "text" in cur.parts[k] && !cur.parts[k].text.trim()) k--;
        const prev = cur.parts[k];
        // the end of the call just started (same tool, no result yet): its outcome, not a second call
        if (prev && "tool" in prev && prev.tool === tool[1] && prev.result === "" && (tool[3] === "" || tool[3] === prev.args)) {
          prev.error = !!tool[2];
          prev.result = result.join("\n");
        } else {
          cur.parts.push({ tool: tool[1], error: !!tool[2], args: tool[3], result: result.join("\n") });
        }
        i = j + 1;
        continue;
      }
      addText(line);
      i++;
    }
    for (const it of items) {
      for (const p of it.parts) if ("text" in p) p.text = p.text.trim();
      it.parts = it.parts.filter((p) => !("text" in p) || p.text);
    }
    return items;
  }

  function turnUsage(u) {
    if (!u) return null;
    const bits = [`${u.inputTokens} in`, `${u.outputTokens} out`];
    if (u.costMicroUsd !== null && u.costMicroUsd !== undefined) bits.push(fmtCost(u.costMicroUsd));
    return h("div", { class: "turn-usage", text: bits.join(" · ") });
  }

  /** The conversation element, or null when `text` is not a transcript it can split. */
  function renderConversation(text, turns) {
    const items = parseTranscript(text);
    if (!items) return null;
    let turn = 0;
    const out = h("div", { class: "conversation", id: "conversation" });
    for (const it of items) {
      if (it.role === "header") { out.append(h("div", { class: "conv-head muted", text: it.heading })); continue; }
      const usage = it.role === "assistant" && turns ? turnUsage(turns[turn]) : null;
      if (it.role === "assistant") turn++;
      const body = it.parts.map((p) => ("tool" in p
        ? h("details", { class: `tool-call${p.error ? " failed" : ""}`, "data-tool": p.tool },
          h("summary", {}, h("b", { text: `tool ${p.tool}` }), p.error ? " (error) " : " ", h("code", { text: p.args })),
          h("pre", { class: "tool-result", text: p.result }))
        : h("div", { class: "text", text: p.text })));
      const label = it.role === "assistant" ? `assistant · turn ${turn}` : it.heading === "User" ? "user" : it.heading.toLowerCase();
      out.append(h("div", { class: `msg ${it.role}`, "data-role": it.role }, h("div", { class: "who", text: label }), body, usage));
    }
    return out;
  }

  window.atomic.conversation = { parseTranscript, renderConversation };
})();

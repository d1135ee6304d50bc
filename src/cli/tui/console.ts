/**
 * `atomic tui`: the full-screen console (ink, in the terminal's alternate
 * screen). Two screens: the run list (filter by status with `s`, by
 * workflow with `w`) and a run (its stage tree with status, elapsed time,
 * tokens and cost, and the selected stage's conversation). What is shown is
 * read from the journal by ConsoleData (console-data.ts) and read again
 * every REFRESH_MS, so runs driven by any process move live; every action
 * goes through the code the CLI and the status page use. The stage pane is
 * `atomic attach` on the selected stage (its AttachFeed, drawn by
 * view/attach-lines.ts): the conversation so far, then model text as it
 * streams, tool calls, usage, attempts and messages with their delivery
 * state; `m` types into it as attach's input line does (a steer, or
 * /followup, /interrupt, /answer). Layout is ink's
 * (flexbox): panes side by side from WIDE_COLS columns, stacked below;
 * below MIN_COLS x MIN_ROWS the console says so in one sentence.
 * Keys are listed by `?` and in docs/guides/terminal-console.md. The mouse
 * (mouse.ts) clicks a run or a stage to select it (a run clicked again
 * opens), clicks the conversation to scroll it, and the wheel moves the
 * selection or scrolls the conversation under it; `hitOf` finds what is
 * under the pointer from the same layout the frame is drawn with.
 */

import { createElement as h, useCallback, useEffect, useRef, useState, type ReactNode } from "react";
import { Box, Text, render, useApp, useInput, useStdin, useWindowSize } from "ink";
import { TextInput } from "@inkjs/ui";
import type { RunStatus } from "../../journal/runs.ts";
import { makeStyle, type Style } from "../style.ts";
import { ConsoleData, filterKey, openQuestions, rowKey, stageRows, type Conversation, type OpenQuestion, type RunDetail, type RunFilter, type RunList, type StageRow } from "./console-data.ts";
import { fit, runHeading, runLine, runsHeader, stageLine } from "./format.ts";
import type { AttachFeed } from "../attach-feed.ts";
import { ATTACH_HELP, parseAttachLine } from "../attach-terminal.ts";
import { AttachPaneText } from "../view/attach-lines.ts";
import { Question } from "./question.ts";
import { MOUSE_OFF, MOUSE_ON, MouseReader, type MouseEvent } from "./mouse.ts";

export const MIN_COLS = 60;
export const MIN_ROWS = 16;
const WIDE_COLS = 140;
const REFRESH_MS = 500;
/** At most one redraw per this many ms for the stage pane's live text (deltas come every few ms). */
const PANE_FRAME_MS = 40;
/** The status filter `s` steps through (undefined: every run). */
const STATUS_FILTERS: (RunStatus | undefined)[] = [undefined, "running", "awaiting_input", "failed", "completed", "interrupted", "cancelled"];
const RUN_LIMIT = 500;

type Mode = { kind: "none" } | { kind: "answer"; q: OpenQuestion } | { kind: "message"; stage: string; runId: string } | { kind: "workflow" } | { kind: "confirm"; what: "cancel"; runId: string } | { kind: "help" };

export interface ConsoleOptions {
  data: ConsoleData;
  color: boolean;
  /** Open on this run. */
  runId?: string;
  filter?: RunFilter;
  /** Said once in the status line at start. */
  note?: string;
}

/** Everything a frame is drawn from (the bench draws frames from it without a terminal). */
export interface ConsoleFrame {
  screen: "runs" | "run";
  filter: RunFilter;
  runs?: RunList;
  runIndex: number;
  detail?: RunDetail;
  stageIndex: number;
  conversation?: Conversation;
  /** Lines scrolled up from the conversation's end. */
  scroll: number;
  focus: "tree" | "conversation";
  mode: Mode;
  flash?: string;
}

/**
 * What the frame holds for `key` (the conversation of a stage's row, the run list of a filter); undefined while it
 * still holds another's (read before a selection or a filter changed): the view reads anew until its own arrives.
 */
function own<T extends { of: string }>(held: T | undefined, key: string | undefined): T | undefined {
  return held && key !== undefined && held.of === key ? held : undefined;
}

/** The run list of the frame's filter (undefined while the list of the filter before is all it holds). */
function listOf(f: ConsoleFrame): RunList | undefined {
  return own(f.runs, filterKey(f.filter));
}

/** The rows of the open run's tree (cached per detail object). */
const rowsCache = new WeakMap<RunDetail, StageRow[]>();
export function rowsOf(detail: RunDetail | undefined): StageRow[] {
  if (!detail) return [];
  let rows = rowsCache.get(detail);
  if (!rows) rowsCache.set(detail, (rows = stageRows(detail.report)));
  return rows;
}

/** The path from the root run of the row at `index`: the names of the rows it is nested in (child workflows), then its own. */
function stagePath(rows: StageRow[], index: number): string {
  const names = [rows[index]!.step.name];
  for (let i = index - 1, depth = rows[index]!.depth; i >= 0 && depth > 0; i--) {
    if (rows[i]!.depth < depth) {
      names.unshift(rows[i]!.step.name);
      depth = rows[i]!.depth;
    }
  }
  return names.join("/");
}

/** `lines` cut into pieces of at most `width` columns. */
function wrapLines(text: string, width: number): string[] {
  const out: string[] = [];
  for (const line of text.replace(/\r/g, "").split("\n")) {
    if (Bun.stringWidth(line) <= width) {
      out.push(line);
      continue;
    }
    let piece = "";
    for (const ch of line) {
      if (Bun.stringWidth(piece + ch) > width) {
        out.push(piece);
        piece = "";
      }
      piece += ch;
    }
    out.push(piece);
  }
  return out;
}

/** The window of `count` items of `total` that keeps `selected` in sight. */
function windowOf(selected: number, total: number, count: number): [number, number] {
  if (total <= count) return [0, total];
  const start = Math.min(Math.max(0, selected - Math.floor(count / 2)), total - count);
  return [start, start + count];
}

/**
 * Lines as few ink nodes: one Text for the lines before the selected one, one for it (inverse when `mark`),
 * one for the rest (a node per line made a 60-row frame cost a millisecond per row: bench/tui.ts).
 */
function lines(list: string[], selected = -1, mark = false): ReactNode[] {
  const text = (key: string, part: string[], inverse = false) => h(Text, { key, wrap: "truncate-end", inverse }, part.map((l) => l || " ").join("\n"));
  if (selected < 0 || selected >= list.length) return list.length ? [text("all", list)] : [];
  const out: ReactNode[] = [];
  if (selected > 0) out.push(text("before", list.slice(0, selected)));
  out.push(text("selected", [list[selected]!], mark));
  if (selected < list.length - 1) out.push(text("after", list.slice(selected + 1)));
  return out;
}

function hints(f: ConsoleFrame): string {
  if (f.mode.kind === "answer") return "Esc: back without answering";
  if (f.mode.kind === "message") return "Enter: send (a steer; /followup TEXT, /interrupt, /answer ID TEXT, /help) · Esc: back";
  if (f.mode.kind === "workflow") return "Enter: send · Esc: back";
  if (f.mode.kind === "confirm") return "y: yes · any other key: no";
  if (f.screen === "runs") return "↑/↓ select · Enter open · s status · w workflow · p pause · c cancel · r resume · R rerun · ? help · q quit";
  return "↑/↓ stage · Tab conversation · a answer · m steer/message · p pause · P pause stage · c cancel · r resume · R rerun · Esc runs · ? help · q quit";
}

const HELP = [
  "The run list",
  "  ↑/↓ or j/k  select a run          Enter  open it",
  "  s  next status filter             w  filter by workflow (empty: all)",
  "The run (its stage tree and the selected stage's conversation)",
  "  ↑/↓ or j/k  select a stage        Tab  scroll the conversation (↑/↓, PgUp/PgDn, End)",
  "  a  answer its open question       m  type to the selected stage (as atomic attach):",
  ...ATTACH_HELP.filter((l) => !l.startsWith("/detach") && !l.startsWith("Tab")).map((l) => `       ${l}`),
  "  Esc  back to the run list",
  "Both",
  "  p  pause / unpause   P  pause / unpause the selected stage alone",
  "  c  cancel (asks first)   r  resume   R  rerun   q  quit",
  "  mouse: a click selects (a run clicked again opens), the wheel moves or scrolls",
  "",
  "Press any key to close this help.",
];

/** One frame of the console for a terminal of `cols` x `rows`. */
export interface ViewProps {
  f: ConsoleFrame;
  cols: number;
  rows: number;
  st: Style;
  color: boolean;
  onAnswer(q: OpenQuestion, text: string): void;
  onText(text: string): void;
}

export function ConsoleView({ f, cols, rows, st, color, onAnswer, onText }: ViewProps) {
  if (cols < MIN_COLS || rows < MIN_ROWS) {
    return h(Text, { wrap: "wrap" }, `The terminal is ${cols}x${rows}, too small for atomic tui: make it at least ${MIN_COLS}x${MIN_ROWS} (q quits).`);
  }
  const now = Date.now();
  const filterText = `status: ${f.filter.status ?? "all"} · workflow: ${f.filter.workflow ?? "all"}`;
  const runs = listOf(f);
  const title = f.screen === "runs" ? `atomic tui · ${runs ? `${runs.total} run(s)` : "reading runs…"} · ${filterText}` : `atomic tui · run ${f.detail?.run.id ?? "…"}`;
  const head = h(Text, { key: "head", wrap: "truncate-end" }, st.bold(fit(title, cols)));
  const flash = h(Text, { key: "flash", wrap: "truncate-end" }, f.flash ? st.yellow(f.flash) : " ");
  const foot = h(Text, { key: "foot", wrap: "truncate-end" }, st.dim(hints(f)));
  const bodyRows = rows - 3;
  let body: ReactNode;
  if (f.mode.kind === "help") body = h(Box, { flexDirection: "column", height: bodyRows }, ...lines(HELP));
  else if (f.screen === "runs") body = runsBody(f, cols, bodyRows, st, onText);
  else body = runBody(f, cols, bodyRows, st, color, now, onAnswer, onText);
  return h(Box, { flexDirection: "column", width: cols, height: rows }, head, body, flash, foot);
}

/** The runs of the list shown in a body of `height` rows (under the title, and the list's header row). */
function runsWindow(f: ConsoleFrame, height: number): [number, number] {
  return windowOf(f.runIndex, listOf(f)?.runs.length ?? 0, height - 1 - (f.mode.kind === "workflow" ? 1 : 0));
}

function runsBody(f: ConsoleFrame, cols: number, height: number, st: Style, onText: (text: string) => void): ReactNode {
  const runs = listOf(f);
  const list = runs?.runs ?? [];
  const out: ReactNode[] = [h(Text, { key: "h", wrap: "truncate-end" }, runsHeader(st, cols))];
  if (runs && list.length === 0) out.push(h(Text, { key: "none" }, f.filter.status || f.filter.workflow ? "no run matches the filter (s, w change it)" : "no runs yet; start one with: atomic run <workflow file>"));
  const [a, b] = runsWindow(f, height);
  const shown: string[] = [];
  for (let i = a; i < b; i++) shown.push(`${i === f.runIndex ? "›" : " "} ${runLine(st, list[i]!, cols - 2)}`);
  out.push(...lines(shown, f.runIndex - a, true));
  if (f.mode.kind === "workflow") out.push(h(Box, { key: "wf" }, h(Text, null, "workflow: "), h(TextInput, { placeholder: "a workflow name, empty for all", onSubmit: onText })));
  return h(Box, { flexDirection: "column", height }, ...out);
}

/**
 * How a run's body of `height` rows is laid out: its heading lines, then the tree and the conversation side by
 * side (from WIDE_COLS) or stacked, and which rows of the tree are shown ([a, b)).
 */
function runLayout(f: ConsoleFrame, d: RunDetail, cols: number, height: number) {
  const questions = openQuestions(d.report);
  const topLines = questions.length ? 2 : 1;
  const rest = height - topLines;
  const wide = cols >= WIDE_COLS;
  const treeHeight = wide ? rest : Math.max(4, Math.floor(rest * 0.45));
  const treeWidth = wide ? Math.floor(cols * 0.45) : cols;
  const convWidth = wide ? cols - treeWidth - 1 : cols;
  const convHeight = wide ? rest : rest - treeHeight;
  const [a, b] = windowOf(f.stageIndex, rowsOf(d).length, treeHeight);
  return { questions, topLines, wide, treeHeight, treeWidth, convWidth, convHeight, a, b };
}

/** What the pointer at column `x`, row `y` (from 1) is over: a run of the list, a stage of the tree, the conversation. */
export type Hit = { area: "runs"; index?: number } | { area: "tree"; index?: number } | { area: "conversation" };

export function hitOf(f: ConsoleFrame, cols: number, rows: number, x: number, y: number): Hit | undefined {
  if (cols < MIN_COLS || rows < MIN_ROWS || f.mode.kind !== "none") return undefined;
  const height = rows - 3;
  // Row 1 is the title, then the body; the last two rows are the status line and the keys.
  if (y < 2 || y > height + 1) return undefined;
  if (f.screen === "runs") {
    const [a, b] = runsWindow(f, height);
    const index = a + (y - 3);
    return y >= 3 && index < b ? { area: "runs", index } : { area: "runs" };
  }
  if (!f.detail) return undefined;
  const l = runLayout(f, f.detail, cols, height);
  const treeTop = 2 + l.topLines;
  if (y < treeTop) return undefined;
  const inTree = l.wide ? x <= l.treeWidth : y < treeTop + l.treeHeight;
  if (!inTree) return l.wide && x === l.treeWidth + 1 ? undefined : { area: "conversation" };
  const index = l.a + (y - treeTop);
  return y < treeTop + l.treeHeight && index < l.b ? { area: "tree", index } : { area: "tree" };
}

function runBody(f: ConsoleFrame, cols: number, height: number, st: Style, color: boolean, now: number, onAnswer: (q: OpenQuestion, text: string) => void, onText: (text: string) => void): ReactNode {
  const d = f.detail;
  if (!d) return h(Box, { height }, h(Text, null, "reading the run…"));
  const rows = rowsOf(d);
  const { questions, wide, treeHeight, treeWidth, convWidth, convHeight, a, b } = runLayout(f, d, cols, height);
  const top: ReactNode[] = [h(Text, { key: "run", wrap: "truncate-end" }, runHeading(st, d.run, cols))];
  if (questions.length) top.push(h(Text, { key: "q", wrap: "truncate-end" }, st.yellow(fit(`${questions.length} open question(s): ${questions[0]!.question} (a answers)`, cols))));
  const shown: string[] = [];
  const paused = new Set(f.detail?.report.pausedStages ?? []);
  for (let i = a; i < b; i++) shown.push(`${i === f.stageIndex ? "›" : " "} ${stageLine(st, rows[i]!, now, treeWidth - 2, paused.size > 0 && paused.has(stagePath(rows, i)))}`);
  const treeLines = rows.length === 0 ? [h(Text, { key: "none" }, "no steps yet")] : lines(shown, f.stageIndex - a, f.focus === "tree");
  const tree = h(Box, { key: "tree", flexDirection: "column", width: treeWidth, height: treeHeight }, ...treeLines);
  let pane: ReactNode;
  if (f.mode.kind === "answer") {
    const q = f.mode.q;
    pane = h(Question, { q: { id: q.id, question: q.question, choices: q.choices, from: `run ${q.runId}` }, color, onAnswer: (text: string) => onAnswer(q, text) });
  } else {
    pane = conversationPane(f, rows[f.stageIndex], convWidth, convHeight - (f.mode.kind === "message" ? 1 : 0), st);
  }
  const paneBox = h(
    Box,
    { key: "pane", flexDirection: "column", width: convWidth, height: convHeight },
    pane,
    f.mode.kind === "message" ? h(Box, { key: "msg" }, h(Text, null, `to ${f.mode.stage}: `), h(TextInput, { placeholder: "a steer, or /followup TEXT, /interrupt", onSubmit: onText })) : null,
  );
  const panes = wide ? h(Box, { flexDirection: "row", gap: 1 }, tree, paneBox) : h(Box, { flexDirection: "column" }, tree, paneBox);
  return h(Box, { flexDirection: "column", height }, ...top, panes);
}

function conversationPane(f: ConsoleFrame, row: StageRow | undefined, width: number, height: number, st: Style): ReactNode {
  // The conversation the frame holds may still be the stage selected before (its feed's last redraw, or the tree
  // moved under it): under this row's header it is read anew until this stage's own arrives.
  const c = own(f.conversation, row && rowKey(row));
  const title = row ? `── ${row.step.name} (${row.step.status})${c?.live ? " live" : ""} ` : "── ";
  const head = h(Text, { key: "t", wrap: "truncate-end", bold: f.focus === "conversation" }, st.dim(fit(title.padEnd(width, "─"), width)));
  if (!row || !c) return h(Box, { flexDirection: "column", height }, head, h(Text, { key: "n" }, row ? "reading…" : "select a stage"));
  if (c.none) return h(Box, { flexDirection: "column", height }, head, h(Text, { key: "n", wrap: "truncate-end" }, st.dim(c.none)));
  const all = wrapLines(c.text.replace(/\n+$/, ""), width);
  const show = height - 1;
  const end = Math.max(show, all.length - f.scroll);
  const shown = all.slice(Math.max(0, end - show), end);
  return h(Box, { flexDirection: "column", height }, head, ...lines(shown));
}

/** Runs the console until `q` (or the caller's `stop`): resolves when it is closed. */
export async function runConsole(opts: ConsoleOptions & { onQuit?: () => void }): Promise<void> {
  // The mouse reports from the console's start to its end, whatever ends the process (mouse.ts).
  const mouseOff = () => process.stdout.write(MOUSE_OFF);
  process.stdout.write(MOUSE_ON);
  process.once("exit", mouseOff);
  try {
    const app = render(h(ConsoleApp, opts), { exitOnCtrlC: false, patchConsole: false, interactive: true, alternateScreen: true });
    await app.waitUntilExit();
  } finally {
    process.off("exit", mouseOff);
    mouseOff();
  }
}

function ConsoleApp(opts: ConsoleOptions & { onQuit?: () => void }) {
  const { data } = opts;
  const st = makeStyle(opts.color);
  const { exit } = useApp();
  const { columns: cols, rows } = useWindowSize();
  const [f, setF] = useState<ConsoleFrame>(() => ({
    screen: opts.runId ? "run" : "runs",
    filter: opts.filter ?? {},
    runIndex: 0,
    stageIndex: 0,
    scroll: 0,
    focus: "tree",
    mode: { kind: "none" },
    ...(opts.note ? { flash: opts.note } : {}),
  }));
  const [runId, setRunId] = useState<string | undefined>(opts.runId);
  const frame = useRef(f);
  frame.current = f;
  // A patch, or a function of the frame as it is then (keys that arrive together each see the one before).
  const update = useCallback((patch: Partial<ConsoleFrame> | ((old: ConsoleFrame) => Partial<ConsoleFrame>)) => setF((old) => ({ ...old, ...(typeof patch === "function" ? patch(old) : patch) })), []);
  const say = useCallback((p: Promise<string>) => void p.then((flash) => update({ flash }), (err: unknown) => update({ flash: err instanceof Error ? err.message : String(err) })), [update]);

  // Live data: the list on the list screen, the run and its selected stage's conversation on the run screen.
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const tick = async () => {
      const cur = frame.current;
      try {
        if (cur.screen === "runs") {
          const runs = await data.runs(cur.filter, RUN_LIMIT);
          if (!stopped) update({ runs, runIndex: Math.min(frame.current.runIndex, Math.max(0, runs.runs.length - 1)) });
        } else if (runId) {
          // The selected stage's conversation comes from its attach feed (below), live; this reads the tree.
          const detail = await data.detail(runId);
          if (!stopped) update({ detail });
        }
      } catch (err) {
        if (!stopped) update({ flash: err instanceof Error ? err.message : String(err) });
      }
      if (!stopped) timer = setTimeout(() => void tick(), REFRESH_MS);
    };
    void tick();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [data, runId, f.screen, f.filter, update]);

  // The stage pane: the selected stage's attach feed, opened when it is selected, closed when another is.
  const rows0 = f.screen === "run" ? rowsOf(f.detail) : [];
  const row0 = rows0[Math.min(f.stageIndex, Math.max(0, rows0.length - 1))];
  const rowPath = row0 ? stagePath(rows0, Math.min(f.stageIndex, rows0.length - 1)) : "";
  const paneKey = row0 ? rowKey(row0) : "";
  const feedRef = useRef<AttachFeed | undefined>(undefined);
  useEffect(() => {
    if (!row0) return;
    if (row0.step.kind !== "stage") {
      update({ conversation: { of: paneKey, text: "", live: false, none: `${row0.step.kind === "ask" ? "an" : "a"} ${row0.step.kind} step has no conversation` } });
      return;
    }
    let closed = false;
    let feed: AttachFeed | undefined;
    let pane: AttachPaneText | undefined;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const show = () => {
      timer = undefined;
      if (closed || !feed || !pane) return;
      const ref = pane.ref;
      const text = pane.value;
      const live = !feed.model.ended(ref);
      update({ conversation: text.trim() ? { of: paneKey, text, live } : { of: paneKey, text: "", live, none: live ? "no output yet" : "it wrote no output" } });
    };
    const later = () => {
      timer ??= setTimeout(show, PANE_FRAME_MS);
    };
    void data.attach(row0.runId, row0.position, rowPath).then(
      (opened) => {
        if (closed) return opened.close();
        feed = opened;
        feedRef.current = opened;
        const ref = opened.model.focus!;
        pane = new AttachPaneText(opened.model, ref, makeStyle(false), later);
        show();
      },
      (err: unknown) => {
        if (!closed) update({ conversation: { of: paneKey, text: "", live: false, none: err instanceof Error ? err.message : String(err) } });
      },
    );
    return () => {
      closed = true;
      clearTimeout(timer);
      pane?.close();
      feed?.close();
      if (feedRef.current === feed) feedRef.current = undefined;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps -- the key names the stage; a new detail object of the same stage keeps its feed
  }, [data, paneKey, update]);

  const quit = () => {
    opts.onQuit?.();
    exit();
  };
  const openRun = (index: number) => {
    const run = listOf(f)?.runs[index];
    if (!run) return;
    setRunId(run.id);
    update({ screen: "run", runIndex: index, stageIndex: 0, scroll: 0, focus: "tree", flash: "" });
    setF((old) => {
      const { detail: _d, conversation: _c, ...rest } = old;
      return rest;
    });
  };
  const selectStage = (index: number) => update((o) => (index === o.stageIndex ? { focus: "tree" } : { stageIndex: index, scroll: 0, conversation: undefined, focus: "tree" }));

  // The mouse: a click selects (a run clicked again opens), the wheel moves the selection or scrolls the conversation.
  const onMouse = (e: MouseEvent) => {
    const hit = hitOf(f, cols, rows, e.x, e.y);
    if (!hit) return;
    const step = e.kind === "wheel-up" ? -1 : 1;
    if (hit.area === "runs") {
      const n = listOf(f)?.runs.length ?? 0;
      if (e.kind !== "click") update((o) => ({ runIndex: Math.max(0, Math.min(n - 1, o.runIndex + step)) }));
      else if (hit.index === f.runIndex) openRun(hit.index);
      else if (hit.index !== undefined) update({ runIndex: hit.index });
    } else if (hit.area === "tree") {
      const n = rowsOf(f.detail).length;
      if (e.kind !== "click") selectStage(Math.max(0, Math.min(n - 1, f.stageIndex + step)));
      else if (hit.index !== undefined) selectStage(hit.index);
    } else if (e.kind === "click") update({ focus: "conversation" });
    else update((o) => ({ scroll: Math.max(0, o.scroll - step * 3) }));
  };
  const mouse = useRef(onMouse);
  mouse.current = onMouse;
  const { stdin } = useStdin();
  useEffect(() => {
    const reader = new MouseReader((e) => mouse.current(e));
    const onData = (chunk: string | Buffer) => reader.push(chunk);
    stdin.on("data", onData);
    return () => void stdin.off("data", onData);
  }, [stdin]);

  const selectedRun = (): string | undefined => (f.screen === "run" ? runId : listOf(f)?.runs[f.runIndex]?.id);

  const act = (input: string, target: string | undefined) => {
    if (!target) return;
    const status = f.screen === "run" ? f.detail?.run.status : listOf(f)?.runs[f.runIndex]?.status;
    if (input === "p") say(data.act(target, status === "paused" ? "unpause" : "pause"));
    else if (input === "c") update({ mode: { kind: "confirm", what: "cancel", runId: target }, flash: `cancel run ${target}? y cancels it, any other key does not` });
    else if (input === "r") say(data.drive("resume", target));
    else if (input === "R") say(data.drive("rerun", target));
  };

  useInput(
    (input, key) => {
      if (f.mode.kind === "help") return update({ mode: { kind: "none" } });
      if (f.mode.kind === "confirm") {
        const m = f.mode;
        update({ mode: { kind: "none" } });
        if (input === "y") say(data.act(m.runId, "cancel"));
        else update({ flash: "not cancelled" });
        return;
      }
      if (f.mode.kind !== "none") {
        if (key.escape) update({ mode: { kind: "none" } });
        return;
      }
      if (input === "q" || (key.ctrl && input === "c")) return quit();
      if (cols < MIN_COLS || rows < MIN_ROWS) return;
      if (input === "?") return update({ mode: { kind: "help" } });
      if (f.screen === "runs") {
        const n = listOf(f)?.runs.length ?? 0;
        if (key.downArrow || input === "j") update((o) => ({ runIndex: Math.max(0, Math.min(n - 1, o.runIndex + 1)) }));
        else if (key.upArrow || input === "k") update((o) => ({ runIndex: Math.max(0, o.runIndex - 1) }));
        else if (key.pageDown) update((o) => ({ runIndex: Math.max(0, Math.min(n - 1, o.runIndex + rows - 5)) }));
        else if (key.pageUp) update((o) => ({ runIndex: Math.max(0, o.runIndex - (rows - 5)) }));
        else if (key.return && n > 0) openRun(f.runIndex);
        else if (input === "s") {
          const i = STATUS_FILTERS.indexOf(f.filter.status);
          update({ filter: { ...f.filter, status: STATUS_FILTERS[(i + 1) % STATUS_FILTERS.length] }, runIndex: 0 });
        } else if (input === "w") update({ mode: { kind: "workflow" } });
        else act(input, selectedRun());
        return;
      }
      const n = rowsOf(f.detail).length;
      if (key.escape || key.backspace) {
        setF((old) => {
          const { detail: _d, conversation: _c, ...rest } = old;
          return { ...rest, screen: "runs", mode: { kind: "none" }, flash: "" };
        });
        setRunId(undefined);
      } else if (key.tab) update({ focus: f.focus === "tree" ? "conversation" : "tree", scroll: 0 });
      else if (f.focus === "conversation" && (key.upArrow || input === "k")) update((o) => ({ scroll: o.scroll + 1 }));
      else if (f.focus === "conversation" && (key.downArrow || input === "j")) update((o) => ({ scroll: Math.max(0, o.scroll - 1) }));
      else if (f.focus === "conversation" && key.pageUp) update((o) => ({ scroll: o.scroll + rows - 5 }));
      else if (f.focus === "conversation" && key.pageDown) update((o) => ({ scroll: Math.max(0, o.scroll - (rows - 5)) }));
      else if (f.focus === "conversation" && key.end) update({ scroll: 0 });
      // (before the run is read there are no rows: the selection stays on the first, as the mouse's wheel keeps it)
      else if (key.downArrow || input === "j") update((o) => ({ stageIndex: Math.max(0, Math.min(n - 1, o.stageIndex + 1)), scroll: 0, conversation: undefined }));
      else if (key.upArrow || input === "k") update((o) => ({ stageIndex: Math.max(0, o.stageIndex - 1), scroll: 0, conversation: undefined }));
      else if (input === "a") {
        const q = f.detail ? openQuestions(f.detail.report)[0] : undefined;
        update(q ? { mode: { kind: "answer", q } } : { flash: "no open question in this run" });
      } else if (input === "P") {
        // The selected stage alone (atomic pause RUN STAGE): paused, or unpaused when it is.
        const rows = rowsOf(f.detail);
        const row = rows[f.stageIndex];
        if (!row || row.step.kind !== "stage" || !f.detail) update({ flash: "select a stage to pause" });
        else {
          const path = stagePath(rows, f.stageIndex);
          say(data.pauseStage(f.detail.run.id, path, !(f.detail.report.pausedStages ?? []).includes(path)));
        }
      } else if (input === "m") {
        const row = rowsOf(f.detail)[f.stageIndex];
        if (!row || row.step.kind !== "stage") update({ flash: "select a stage to message" });
        else update({ mode: { kind: "message", stage: row.step.name, runId: row.runId } });
      } else act(input, selectedRun());
    },
    { isActive: true },
  );

  const onAnswer = (q: OpenQuestion, text: string) => {
    update({ mode: { kind: "none" }, flash: `sending the answer to ${q.id}…` });
    say(data.answer(q, text));
  };
  // A line typed to the selected stage, as attach's input line: a steer, or a command.
  const typed = (line: string) => {
    const cmd = parseAttachLine(line.startsWith("//") ? line.slice(1) : line);
    const feed = feedRef.current;
    if (typeof cmd === "string") return update({ flash: cmd });
    if (cmd.kind === "help") return update({ mode: { kind: "help" } });
    if (cmd.kind === "none" || cmd.kind === "detach") return;
    if (!feed) return update({ flash: "the stage's conversation is still being read; try again" });
    const sent = cmd.kind === "send" ? feed.send(cmd.text, cmd.mode).then(() => `${cmd.mode} sent to ${feed.model.focus?.path ?? "the stage"}`) : feed.answer(cmd.question, cmd.text).then(() => `answer to ${cmd.question} sent`);
    say(sent);
  };
  // Text fields (a workflow filter, a message): their Enter sends here, where the frame is known.
  const onText = (text: string) => {
    const m = f.mode;
    update({ mode: { kind: "none" } });
    if (m.kind === "workflow") update({ filter: { ...f.filter, workflow: text.trim() || undefined }, runIndex: 0 });
    else if (m.kind === "message") typed(text);
  };
  return h(ConsoleView, { f, cols, rows, st, color: opts.color, onAnswer, onText });
}

/**
 * How `atomic run` / `atomic resume` show progress, chosen once:
 * - `tree`  (stdout is a terminal): a live tree of stages with status and
 *   elapsed time, redrawn in place ~10 times a second; when stdin is a
 *   terminal too, a ctx.ask question is answered right there
 *   (inline-answers.ts);
 * - `lines` (not a terminal): one plain line per stage start and end;
 * - `json`  (--json): every engine event as one NDJSON line;
 * - `quiet` (--quiet): nothing until the result.
 * Tool steps are too many to list one by one; the tree counts them per run.
 */

import { formatCost } from "../../runners/usage.ts";
import type { EngineEvent, EngineObserver } from "../../engine/observer.ts";
import type { CliSession } from "../session.ts";
import { colorFor, formatDuration, type Style } from "../style.ts";
import { TreeModel } from "./tree-model.ts";
import { out, err } from "../output.ts";
import { failureDetail, failureSentence } from "../failure.ts";
import { queueWait, queueWaitText } from "../../journal/fleet-view.ts";
import { watchHosts } from "./host-watch.ts";
import { readEnv } from "../../shared/config/environment.ts";
import { inlineAnswers, type InlineAnswers } from "./inline-answers.ts";

export interface RunView {
  observer: EngineObserver;
  /** Stop redrawing and leave the final picture on screen. */
  close(): void;
  /** Print a line above the live tree (or plainly). */
  note(line: string): void;
}

export function createRunView(s: CliSession): RunView {
  if (s.globals.json) return jsonView();
  if (s.globals.quiet) return { observer: () => {}, close() {}, note() {} };
  // A dumb terminal cannot move the cursor to redraw the tree.
  if (process.stdout.isTTY && readEnv("TERM") !== "dumb") return treeView(s);
  return linesView(s);
}

/**
 * One line per event, the events of one event-loop turn in one write: a
 * fan-out's events come in bursts, and a write per event woke the reader
 * once per event (a 500-stage fan-out writes 1,500 lines; bench/pool.ts).
 * A run's start and end are written at once, with what was batched before
 * them: `run_started` carries the id a consumer needs to resume the run,
 * and a step's function may run, and the process die (kill -9, a power
 * cut), before the turn ends; the journal has the step events, the reader
 * would not have the run. close() writes what is left.
 */
function jsonView(): RunView {
  let lines = "";
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    const text = lines;
    lines = "";
    out(text);
  };
  return {
    observer(e) {
      lines += `${JSON.stringify(e)}\n`;
      if (e.type === "run_started" || e.type === "run_ended") flush();
      else if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    },
    close: flush,
    note() {},
  };
}

function linesView(s: CliSession): RunView {
  const started = new Map<string, number>();
  let rootId: string | undefined;
  let replayed = 0;
  const st = s.style;
  const print = (line: string) => out(`${line}\n`);
  // Stages queued for a worker host: a line when the reason they wait first shows or changes kind (not every tick).
  const forHost = new Map<string, { name: string; queue: string; said?: string }>();
  const hosts = watchHosts(s, () => forHost.size > 0, (list, now) => {
    for (const w of forHost.values()) {
      const why = queueWait(list, w.queue, now);
      if (why && why.kind !== w.said) print(`  stage ${w.name} ${queueWaitText(why, now)}`);
      w.said = why?.kind;
    }
  });
  return {
    observer(e: EngineEvent) {
      if (e.type === "step_started" && e.queued && e.hostQueue) {
        forHost.set(`${e.runId}/${e.position}`, { name: e.name, queue: e.hostQueue });
        hosts.poke();
      } else if (e.type === "step_started" || e.type === "step_running" || e.type === "step_ended") {
        forHost.delete(`${e.runId}/${e.position}`);
      }
      switch (e.type) {
        case "run_started":
          // The root run (one at a time: a chain's next run, ctx.continueAsNew, starts once the one before ended).
          if (!e.parentId) {
            rootId = e.runId;
            replayed = 0;
          }
          print(`${e.resumed ? "resumed" : "started"} run ${e.runId} (${e.workflow})${e.parentId ? ` as a child of ${e.parentId}` : ""}`);
          break;
        case "step_started":
          if (e.kind === "tool") break;
          // A queued stage waits for a free worker: "started" (and its timing) once one runs it.
          if (!e.queued) started.set(`${e.runId}/${e.position}`, e.at);
          print(`  ${e.kind} ${e.name} ${e.queued ? "queued" : "started"}${e.attempt > 1 ? ` (attempt ${e.attempt})` : ""}`);
          break;
        case "step_running":
          started.set(`${e.runId}/${e.position}`, e.at);
          print(`  stage ${e.name} started${e.attempt > 1 ? ` (attempt ${e.attempt})` : ""}`);
          break;
        case "step_ended": {
          if (e.replayed) {
            replayed++;
            break;
          }
          if (e.kind === "tool" && e.status === "completed") break;
          const t0 = started.get(`${e.runId}/${e.position}`);
          const took = t0 ? ` in ${formatDuration(e.at - t0)}` : "";
          // A step its run stopped is "stopped", as `atomic show` calls it, without the stop's internal code (lease_lost).
          const stopped = e.status === "cancelled";
          const why = e.error && !(stopped && /^[a-z_]+$/.test(e.error.message)) ? `: ${failureSentence(e.error)}` : "";
          const u = e.result?.usage;
          const spent = u ? st.dim(` (${u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheWriteTokens} tokens, ${formatCost(u)})`) : "";
          print(`  ${e.kind} ${e.name} ${colorFor(st, e.status)(stopped ? "stopped" : e.status)}${took}${spent}${why}`);
          // The run's own failure line quotes stderr again; a stage that fails inside a group or child is seen here.
          if (e.error && e.status === "failed") for (const l of failureDetail(e.error, st, false, "    ")) print(l);
          break;
        }
        case "log":
          print(`  ${e.message}`);
          break;
        case "warning":
          err(`${st.yellow("warning:")} ${e.message}\n`);
          break;
        case "run_ended":
          // the root's end is printed with the result
          if (e.runId === rootId && replayed > 0) print(`  (${replayed} recorded step(s) replayed from the journal, not re-run)`);
          if (e.runId !== rootId) print(`run ${e.runId} ${colorFor(st, e.status)(e.status)}${e.error ? `: ${failureSentence(e.error)}` : ""}`);
          break;
        case "paused":
          print(`run ${e.runId} paused: no new step starts until atomic unpause`);
          break;
        case "unpaused":
          print(`run ${e.runId} unpaused`);
          break;
        case "prompt":
          print(promptLine(e, st));
          break;
        case "message":
          if (e.state === "delivered") print(`  message ${e.messageId} delivered to ${e.stage}${e.live ? "" : " before it started"}`);
          else print(`  message ${e.messageId} to ${e.stage} ${e.state}${e.reason ? `: ${e.reason}` : ""}`);
          break;
        case "stage_output":
        case "stage_usage":
          break;
        case "step_waiting":
          print(`  ${e.kind === "child" ? "workflow" : "stage"} ${e.name} waiting: ${e.reason}`);
          break;
      }
    },
    close() {
      hosts.stop();
    },
    note: print,
  };
}

function treeView(s: CliSession): RunView {
  const style = s.style;
  const model = new TreeModel();
  const hosts = watchHosts(s, () => model.hostQueued(), (list, now) => model.setHosts(list, now));
  let drawn = 0;
  const notes: string[] = [];
  // While a question is on the screen below the tree, the tree is not redrawn (notes wait).
  let held = false;
  const draw = () => {
    if (held) return;
    const rows = Math.max(5, (process.stdout.rows || 40) - 2);
    const lines = model.render(style, Date.now());
    const shown = lines.length > rows ? [style.dim(`… ${lines.length - rows + 1} more above`), ...lines.slice(-rows + 1)] : lines;
    let frame = drawn > 0 ? `\x1b[${drawn}A\r\x1b[J` : "";
    for (const n of notes.splice(0)) frame += `${n}\n`;
    frame += shown.map((l) => `${l}\n`).join("");
    out(frame);
    drawn = shown.length;
  };
  const timer = setInterval(draw, 100);
  timer.unref();
  const asks: InlineAnswers | undefined = process.stdin.isTTY
    ? inlineAnswers(s, {
        print(line) {
          notes.push(line);
          draw();
        },
        hold(on) {
          held = on;
          draw();
        },
      })
    : undefined;
  return {
    observer(e) {
      if (e.type === "warning") notes.push(`${style.yellow("warning:")} ${e.message}`);
      else if (e.type === "log") notes.push(e.message);
      else if (e.type === "paused" || e.type === "unpaused") notes.push(`run ${e.type}`);
      else if (e.type === "prompt" && asks) asks.onPrompt(e);
      else if (e.type === "prompt") notes.push(promptLine(e, style));
      else {
        model.apply(e);
        if (e.type === "step_started" && e.hostQueue) hosts.poke();
      }
    },
    close() {
      hosts.stop();
      clearInterval(timer);
      asks?.close();
      draw();
    },
    note(line) {
      notes.push(line);
      draw();
    },
  };
}

function promptLine(e: Extract<EngineEvent, { type: "prompt" }>, st: Style): string {
  if (e.state === "answered") return `  question ${e.promptId} answered: ${JSON.stringify(e.answer)}`;
  if (e.state === "timed_out") return `  question ${e.promptId} was not answered in time`;
  const choices = e.choices ? ` [${e.choices.join("/")}]` : "";
  return `  ${st.yellow("question")} ${e.promptId}: ${e.question}${choices}\n  answer with: atomic answer ${e.rootId} ${e.promptId} <answer>`;
}

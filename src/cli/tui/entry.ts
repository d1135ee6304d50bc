/**
 * The terminal UI bundle: ink and React load only in a process that shows
 * one (a foreground run asking a question on a terminal, `atomic tui`),
 * through importEntry (src/shared/entry-points.ts says why). Why ink:
 * docs/design/terminal-console.md.
 */

export { showInlineQuestion } from "./inline.ts";
export { runConsole, type ConsoleOptions } from "./console.ts";
export { ConsoleData } from "./console-data.ts";

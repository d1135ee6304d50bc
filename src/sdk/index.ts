/**
 * The SDK: what `import { workflow, v } from "atomic"` gives a workflow file.
 * The binary registers this module under the name "atomic" before it loads
 * a user's file, so it resolves from anywhere on disk. It never imports the
 * engine or the journal.
 */

export * as v from "valibot";
export { workflow, isWorkflow, ExitSignal } from "./workflow.ts";
export { sh, quoteShell, type ShellValue } from "./shell.ts";
export { baseBranch, commitFiles, openPullRequest, type CommitFiles, type PullRequest } from "./git.ts";
export { writeFileAtomic } from "./files.ts";
export { capturePage, pageUrl, PageCaptureError, type CaptureOptions, type PageCapture } from "./browser.ts";
export { captureInSandbox, type SandboxedCapture } from "./capture-stage.ts";
export { recordTerminal, type TerminalRecording, type TerminalRecordingOptions } from "./terminal-recording.ts";
export type * from "./types.ts";
export { AtomicError, StepFailedError, CancelledError, NonRetryableError } from "../shared/errors.ts";

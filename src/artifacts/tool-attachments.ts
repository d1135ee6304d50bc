/**
 * Files an agent attaches to a message it sends with its `message` run tool
 * (`attach: ["notes.md", "shots/home.png"]`), read where the stage runs: by
 * the process that carries the call to the run (intercom/stage-tools.ts),
 * which may be on a worker host or inside the stage's sandbox, so the
 * driver gets the files' contents, never a path it might not see.
 *
 * Only files inside the stage's working directory can go (after links are
 * followed): an agent attaches what it made or was given there, never a
 * file of the machine's it could not otherwise hand on. Together they are
 * at most TOOL_ATTACHMENT_BYTES, so the call fits one intercom frame (1 MiB,
 * base64 included); the driver also holds each to the configured
 * `artifacts.maxAttachmentBytes` (engine/attachments.ts). A file that cannot
 * go is one sentence, the tool's error result; nothing is sent.
 */

import { readFileSync, realpathSync, statSync } from "node:fs";
import { basename, relative, resolve, sep } from "node:path";

/** The most bytes a message tool call may attach, all files together. */
export const TOOL_ATTACHMENT_BYTES = 512 * 1024;
/** The most files one call may attach. */
export const TOOL_ATTACHMENT_FILES = 10;

export interface ToolAttachment {
  name: string;
  /** The file's bytes, base64. */
  data: string;
}

/** The files `attach` names, read from `cwd`, or the sentence saying why not. */
export function readToolAttachments(attach: unknown, cwd: string): ToolAttachment[] | { refused: string } {
  if (!Array.isArray(attach) || attach.some((p) => typeof p !== "string" || p.trim() === "")) {
    return { refused: 'attach must be a list of file paths in your working directory, e.g. ["notes.md"]' };
  }
  if (attach.length > TOOL_ATTACHMENT_FILES) return { refused: `attach at most ${TOOL_ATTACHMENT_FILES} files to one message; send the rest in another` };
  let root: string;
  try {
    root = realpathSync(cwd);
  } catch {
    return { refused: `the stage's working directory ${cwd} cannot be read, so nothing can be attached` };
  }
  let total = 0;
  const out: ToolAttachment[] = [];
  for (const given of attach as string[]) {
    let real: string;
    try {
      real = realpathSync(resolve(cwd, given));
    } catch {
      return { refused: `cannot attach ${given}: no such file in your working directory` };
    }
    if (real !== root && !real.startsWith(root.endsWith(sep) ? root : root + sep)) {
      return { refused: `cannot attach ${given}: it is outside your working directory (${relative(root, real)}); attach only files in it` };
    }
    const st = statSync(real);
    if (st.isDirectory()) return { refused: `cannot attach ${given}: it is a directory; attach its files one by one` };
    if (!st.isFile()) return { refused: `cannot attach ${given}: it is not a regular file` };
    total += st.size;
    if (total > TOOL_ATTACHMENT_BYTES) {
      return { refused: `cannot attach ${given}: the files come to more than ${TOOL_ATTACHMENT_BYTES / 1024} KiB together, the message tool's limit; attach fewer or smaller files, or name their paths in the text` };
    }
    out.push({ name: basename(resolve(cwd, given)), data: readFileSync(real).toString("base64") });
  }
  return out;
}

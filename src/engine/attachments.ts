/**
 * Files attached to a message (`atomic send RUN STAGE TEXT --attach FILE`;
 * `attachments` of POST /api/runs/:id/messages, which the page's form
 * sends; `attach` of an agent's `message` tool, read where the stage runs,
 * artifacts/tool-attachments.ts): each is checked (a readable regular file,
 * or a named base64 content, at most `artifacts.maxAttachmentBytes`),
 * copied into the run's artifacts (`artifacts/<root run>/attachments/<message
 * id>/<name>`, so the stage reads the file as it was when sent, and `gc`
 * removes it with the run), and delivered as `reads` are to a stage's prompt:
 * the message's text names each copy and carries a text file's contents in a
 * <file> block, cut where the message's size cap (64 KiB) would be passed; a
 * binary file is named only (an agent with file tools reads the copy).
 */

import { copyFileSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import type { Journal } from "../journal/journal.ts";
import { MAX_MESSAGE_TEXT } from "../journal/messages.ts";
import { CONFIG_DEFAULTS } from "../shared/config/schema.ts";
import { UsageError } from "../shared/errors.ts";
import { formatBytes } from "../shared/format-bytes.ts";
import { checkMessageId, sendMessage, type SendRequest, type SendResult } from "./messaging.ts";

export interface AttachmentFile {
  /** As the user named it (a path, or the name a content came with). */
  given: string;
  /** Its absolute path, or its bytes (sent by the page or a stage's message tool). */
  source: string | Buffer;
  bytes: number;
}

export interface Attached {
  /** Where the copies are (one directory per message). */
  dir: string;
  /** The message's text with the attachments delivered in it. */
  text: string;
}

/** Checks every file before anything is copied or sent: one sentence and a hint for the first that cannot go. */
export function checkAttachments(files: readonly string[], cwd: string, maxBytes: number = CONFIG_DEFAULTS.artifacts.maxAttachmentBytes): AttachmentFile[] {
  return files.map((given) => {
    const source = resolve(cwd, given);
    let size: number;
    try {
      const st = statSync(source);
      if (st.isDirectory()) {
        throw new UsageError("bad_attachment", `cannot attach ${given}: it is a directory`, { hint: "attach its files one by one (--attach FILE for each), or an archive of it" });
      }
      if (!st.isFile()) throw new UsageError("bad_attachment", `cannot attach ${given}: it is not a regular file`, { hint: "attach a regular file" });
      size = st.size;
    } catch (err) {
      if (err instanceof UsageError) throw err;
      const code = (err as NodeJS.ErrnoException).code;
      throw new UsageError("bad_attachment", `cannot attach ${given}: ${code === "ENOENT" ? "no such file" : code === "EACCES" ? "permission denied" : (err as Error).message}`, {
        hint: "check the path (relative paths are taken from the current directory)",
      });
    }
    if (size > maxBytes) {
      throw new UsageError("bad_attachment", `cannot attach ${given}: it is ${formatBytes(size)}, more than the attachment cap of ${formatBytes(maxBytes)}`, {
        hint: "attach a smaller file, or raise artifacts.maxAttachmentBytes in config.json",
      });
    }
    return { given, source, bytes: size };
  });
}

/**
 * Attachments sent as contents, `[{ name, data }]` (`data` base64): the page's form, the HTTP API and a stage's
 * message tool. `what` names the field in the sentences (`"attachments"`). One sentence and a hint for the first
 * that cannot go.
 */
export function attachmentContents(list: unknown, maxBytes: number = CONFIG_DEFAULTS.artifacts.maxAttachmentBytes, what = "attachments"): AttachmentFile[] {
  const hint = `send "${what}": [{"name": "notes.md", "data": "<the file's bytes in base64>"}]`;
  if (list === undefined) return [];
  if (!Array.isArray(list)) throw new UsageError("bad_attachment", `"${what}" must be a list of {name, data}`, { hint });
  return list.map((item: unknown, i) => {
    const x = item && typeof item === "object" && !Array.isArray(item) ? (item as Record<string, unknown>) : {};
    const name = x.name;
    if (typeof name !== "string" || name.trim() === "" || /[/\\\0]/.test(name) || /^\.+$/.test(name)) {
      throw new UsageError("bad_attachment", `attachment ${i + 1} needs a file name ("name") without slashes`, { hint });
    }
    if (typeof x.data !== "string" || !BASE64.test(x.data)) throw new UsageError("bad_attachment", `cannot attach ${name}: its "data" is not base64`, { hint });
    const bytes = Buffer.from(x.data, "base64");
    if (bytes.length > maxBytes) {
      throw new UsageError("bad_attachment", `cannot attach ${name}: it is ${formatBytes(bytes.length)}, more than the attachment cap of ${formatBytes(maxBytes)}`, {
        hint: "attach a smaller file, or raise artifacts.maxAttachmentBytes in config.json",
      });
    }
    return { given: name, source: bytes, bytes: bytes.length };
  });
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Copies the files into the run's artifacts and returns the text to send; `undo()` the copies if the send is refused. */
export function attach(artifactsRoot: string, rootId: string, messageId: string, text: string, files: readonly AttachmentFile[]): Attached {
  // A message id may be made of dots only ("..", messaging.ts): the directory's name never is.
  const dir = join(artifactsRoot, rootId, "attachments", /^\.+$/.test(messageId) ? `dots-${messageId}` : messageId);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const copies: { name: string; path: string; file: AttachmentFile }[] = [];
  const used = new Set<string>();
  for (const file of files) {
    const base = typeof file.source === "string" ? basename(file.source) : file.given;
    let name = base;
    for (let n = 2; used.has(name); n++) name = `${n}-${base}`;
    used.add(name);
    const path = join(dir, name);
    if (typeof file.source === "string") copyFileSync(file.source, path);
    else writeFileSync(path, file.source, { mode: 0o600 });
    copies.push({ name, path, file });
  }
  const head = `${text}\n\nAttached files (${copies.length}): ${copies.map((c) => c.path).join(", ")}`;
  let room = MAX_MESSAGE_TEXT - Buffer.byteLength(head) - 200 * copies.length;
  const blocks = copies.map((c) => {
    const bytes = readFileSync(c.path);
    if (bytes.includes(0)) return `<file path="${c.path}" bytes="${bytes.length}">\n(binary: read it from ${c.path})\n</file>`;
    const kept = bytes.subarray(0, Math.max(0, room));
    room -= kept.length;
    const cut = bytes.length - kept.length;
    const note = cut > 0 ? `\n(cut: ${cut} of ${bytes.length} bytes left out; the whole file is ${c.path})` : "";
    return `<file path="${c.path}">\n${kept.toString("utf8")}${note}\n</file>`;
  });
  return { dir, text: `${head}\n\n${blocks.join("\n\n")}` };
}

/** The copies of a message that was not sent. */
export function removeAttached(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * Sends `req` with `files` attached, the one path of `atomic send`, the page and the message tool: copies them
 * under `artifactsRoot` (for the run `rootId`, message `req.id`), sends the text that names them, and removes
 * the copies when the send is refused.
 */
export async function sendAttached(
  journal: Journal,
  req: SendRequest & { id: string },
  files: readonly AttachmentFile[],
  artifactsRoot: string,
  rootId: string,
): Promise<{ sent: SendResult; attached: Attached | undefined }> {
  const attached = files.length ? attach(artifactsRoot, rootId, checkMessageId(req.id), req.text, files) : undefined;
  try {
    return { sent: await sendMessage(journal, { ...req, text: attached?.text ?? req.text }), attached };
  } catch (err) {
    if (attached) removeAttached(attached.dir);
    throw err;
  }
}

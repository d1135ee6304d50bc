/**
 * The openai runner's file tools (read, write, edit, list, grep) on real
 * temp directories: every path and every entry visited is resolved to its
 * real path and refused outside the stage's cwd (symlinked files and
 * directories, dangling symlinks, `..` segments, absolute paths, symlink
 * loops), fifos, sockets and device files are refused without being
 * opened, and `read` is bounded per call with an offset to page on. The
 * same through the binary is in openai-binary.test.ts.
 */

import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { ToolBox, TOOL_NAMES } from "../../src/runners/openai/tools.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";

let dir: string;
let cwd: string;
let outsideDir: string;
let box: ToolBox;
const children: ChildProcess[] = [];
const servers: Server[] = [];

beforeEach(() => {
  dir = makeTempDir("atomic-tools-");
  cwd = join(dir, "work");
  outsideDir = join(dir, "outside");
  mkdirSync(join(cwd, "sub"), { recursive: true });
  mkdirSync(outsideDir);
  writeFileSync(join(outsideDir, "secret.txt"), "TOPSECRET outside\n");
  writeFileSync(join(cwd, "a.txt"), "alpha inside\n");
  writeFileSync(join(cwd, "sub", "b.txt"), "beta inside\n");
  box = new ToolBox(cwd, TOOL_NAMES);
});

afterEach(() => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  for (const s of servers.splice(0)) s.close();
  removeTempDirs();
});

function tool(name: string, args: Record<string, unknown>) {
  return box.run(name, JSON.stringify(args), new AbortController().signal);
}

const REFUSED_OUTSIDE = /^error: refused: .* is outside the stage's working directory$/;

describe("symlinks", () => {
  test("a symlinked file pointing outside: read, write and edit are refused; grep and list do not open it", async () => {
    symlinkSync(join(outsideDir, "secret.txt"), join(cwd, "leak.txt"));
    expect((await tool("read", { path: "leak.txt" })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("write", { path: "leak.txt", content: "overwritten" })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("edit", { path: "leak.txt", old_text: "TOPSECRET", new_text: "x" })).output).toMatch(REFUSED_OUTSIDE);
    expect(readFileSync(join(outsideDir, "secret.txt"), "utf8")).toBe("TOPSECRET outside\n");
    const grep = await tool("grep", { pattern: "TOPSECRET|inside" });
    expect(grep.ok).toBe(true);
    expect(grep.output).not.toContain("TOPSECRET");
    expect(grep.output).toContain("a.txt:1: alpha inside");
    expect(grep.output).toContain("(1 symbolic link(s) leading outside the working directory not followed)");
    expect((await tool("grep", { pattern: "TOPSECRET", path: "leak.txt" })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("list", {})).output).toBe("a.txt\nleak.txt (symbolic link outside the working directory)\nsub/");
  });

  test("a symlinked directory pointing outside: nothing under it is read, listed, searched or created", async () => {
    symlinkSync(outsideDir, join(cwd, "out"));
    expect((await tool("read", { path: "out/secret.txt" })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("list", { path: "out" })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("grep", { pattern: "TOPSECRET", path: "out" })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("write", { path: "out/new.txt", content: "x" })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("write", { path: "out/deeper/new.txt", content: "x" })).output).toMatch(REFUSED_OUTSIDE);
    expect(existsSync(join(outsideDir, "new.txt"))).toBe(false);
    expect(existsSync(join(outsideDir, "deeper"))).toBe(false);
    const grep = await tool("grep", { pattern: "." });
    expect(grep.output).not.toContain("TOPSECRET");
    expect(grep.output).toContain("sub/b.txt:1: beta inside");
    expect(grep.output).toContain("(1 symbolic link(s) leading outside");
  });

  test("a dangling symlink is not written through (it would create the file wherever it points)", async () => {
    symlinkSync(join(outsideDir, "planted.txt"), join(cwd, "dangling.txt"));
    symlinkSync(join(outsideDir, "nodir"), join(cwd, "danglingdir"));
    const file = await tool("write", { path: "dangling.txt", content: "x" });
    expect(file.output).toBe('error: refused: "dangling.txt" goes through a symbolic link whose target does not exist');
    expect((await tool("write", { path: "danglingdir/x.txt", content: "x" })).output).toContain("goes through a symbolic link whose target does not exist");
    expect(existsSync(join(outsideDir, "planted.txt"))).toBe(false);
    expect(existsSync(join(outsideDir, "nodir"))).toBe(false);
    expect((await tool("list", {})).output).toContain("dangling.txt (broken symbolic link)");
  });

  test("symlinks that stay inside work, and a symlink loop is walked once", async () => {
    symlinkSync(join(cwd, "a.txt"), join(cwd, "sub", "to-a.txt"));
    symlinkSync(cwd, join(cwd, "sub", "loop"));
    expect((await tool("read", { path: "sub/to-a.txt" })).output).toBe("alpha inside\n");
    const edit = await tool("edit", { path: "sub/to-a.txt", old_text: "alpha", new_text: "ALPHA" });
    expect(edit.output).toBe("replaced 1 occurrence(s) in a.txt"); // the real file is named
    const grep = await tool("grep", { pattern: "inside" });
    expect(grep.ok).toBe(true);
    expect(grep.output.split("\n").sort()).toEqual(["a.txt:1: ALPHA inside", "sub/b.txt:1: beta inside"]);
    expect((await tool("list", { path: "sub" })).output).toBe("b.txt\nloop/\nto-a.txt");
  });
});

describe("paths", () => {
  test("`..` segments: refused when they leave the cwd, fine when they stay inside", async () => {
    for (const path of ["../outside/secret.txt", "sub/../../outside/secret.txt", "..", "sub/../.."]) {
      expect((await tool("read", { path })).output).toMatch(REFUSED_OUTSIDE);
    }
    expect((await tool("write", { path: "sub/../../escape.txt", content: "x" })).output).toMatch(REFUSED_OUTSIDE);
    expect(existsSync(join(dir, "escape.txt"))).toBe(false);
    expect((await tool("read", { path: "sub/../a.txt" })).output).toBe("alpha inside\n");
    // `out/..` is normalized before it is resolved: the cwd itself, not the parent of the link's target
    symlinkSync(outsideDir, join(cwd, "out"));
    expect((await tool("list", { path: "out/.." })).output).toBe("a.txt\nout (symbolic link outside the working directory)\nsub/");
  });

  test("absolute paths: outside refused, inside accepted (by the given or the real path)", async () => {
    expect((await tool("read", { path: join(outsideDir, "secret.txt") })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("read", { path: "/etc/passwd" })).output).toMatch(REFUSED_OUTSIDE);
    expect((await tool("write", { path: join(dir, "escape.txt"), content: "x" })).output).toMatch(REFUSED_OUTSIDE);
    expect(existsSync(join(dir, "escape.txt"))).toBe(false);
    expect((await tool("read", { path: join(cwd, "a.txt") })).output).toBe("alpha inside\n");
    // the stage's cwd given through a symlink: both spellings are inside
    symlinkSync(cwd, join(dir, "cwd-link"));
    box = new ToolBox(join(dir, "cwd-link"), TOOL_NAMES);
    expect((await tool("read", { path: "a.txt" })).output).toBe("alpha inside\n");
    expect((await tool("read", { path: join(cwd, "sub", "b.txt") })).output).toBe("beta inside\n");
    expect((await tool("read", { path: join(dir, "cwd-link", "..", "outside", "secret.txt") })).output).toMatch(REFUSED_OUTSIDE);
  });
});

describe("special files", () => {
  test("a fifo is refused by every tool and never opened (a writer waiting on it stays blocked)", async () => {
    const fifo = join(cwd, "pipe");
    expect(spawnSync("mkfifo", [fifo]).status).toBe(0);
    // Blocks until someone opens the fifo for reading: a tool that opened it would read OPENED.
    const writer = spawn("/bin/sh", ["-c", `echo OPENED > '${fifo}'`], { stdio: "ignore" });
    children.push(writer);
    for (const [name, args] of [
      ["read", { path: "pipe" }],
      ["edit", { path: "pipe", old_text: "a", new_text: "b" }],
      ["write", { path: "pipe", content: "x" }],
      ["grep", { pattern: ".", path: "pipe" }],
    ] as const) {
      const r = await tool(name, args);
      expect(r.output).toBe("error: refused: pipe is a fifo, not a regular file");
    }
    const grep = await tool("grep", { pattern: "OPENED|inside" });
    expect(grep.output).not.toContain("OPENED");
    expect(grep.output).toContain("a.txt:1: alpha inside");
    expect((await tool("list", {})).output).toBe("a.txt\npipe (fifo)\nsub/");
    expect(writer.exitCode).toBe(null); // still waiting for a reader
  });

  test("a socket and a device file are refused", async () => {
    const sock = join(cwd, "sock");
    const server = createServer();
    servers.push(server);
    await new Promise<void>((r) => server.listen(sock, r));
    expect((await tool("read", { path: "sock" })).output).toBe("error: refused: sock is a socket, not a regular file");
    expect(spawnSync("mknod", [join(cwd, "null"), "c", "1", "3"]).status).toBe(0); // the tests run as root
    expect((await tool("read", { path: "null" })).output).toBe("error: refused: null is a device, not a regular file");
    expect((await tool("write", { path: "null", content: "x" })).output).toBe("error: refused: null is a device, not a regular file");
    expect((await tool("list", {})).output).toBe("a.txt\nnull (device)\nsock (socket)\nsub/");
  });
});

describe("bounded read", () => {
  test("a big file is read in pages: each result fits the cap, ends on a line break, and names the next offset", async () => {
    const lines = Array.from({ length: 5000 }, (_, i) => `line ${i} ${"x".repeat(i % 40)}`);
    const content = `${lines.join("\n")}\n`;
    writeFileSync(join(cwd, "big.txt"), content);
    let offset = 0;
    let got = "";
    let pages = 0;
    for (;;) {
      const r = await tool("read", { path: "big.txt", offset });
      expect(r.ok).toBe(true);
      expect(Buffer.byteLength(r.output)).toBeLessThanOrEqual(32 * 1024);
      pages++;
      const note = /\n… \(big\.txt has (\d+) bytes; this was bytes (\d+) to (\d+); call read with offset (\d+) for the rest\)$/.exec(r.output);
      if (!note) {
        got += r.output;
        break;
      }
      expect(Number(note[1])).toBe(Buffer.byteLength(content));
      expect(Number(note[2])).toBe(offset);
      const page = r.output.slice(0, note.index);
      expect(page.endsWith("\n")).toBe(true);
      got += page;
      offset = Number(note[4]);
    }
    expect(got).toBe(content);
    expect(pages).toBeGreaterThan(3);
    expect((await tool("read", { path: "big.txt", offset: Buffer.byteLength(content) + 5 })).output).toContain("is at or past the end");
  });

  test("a file without line breaks pages on character boundaries (multi-byte text stays whole)", async () => {
    const content = "é€😀".repeat(20_000);
    writeFileSync(join(cwd, "wide.txt"), content);
    let offset = 0;
    let got = "";
    for (;;) {
      const r = await tool("read", { path: "wide.txt", offset });
      const note = /\n… \(.*call read with offset (\d+) for the rest\)$/.exec(r.output);
      if (!note) {
        got += r.output;
        break;
      }
      const page = r.output.slice(0, note.index);
      expect(page).not.toContain("\uFFFD");
      got += page;
      offset = Number(note[1]);
    }
    expect(got).toBe(content);
  });
});

/**
 * What the binary carries for `atomic init`, `atomic types` and `atomic
 * check` (scripts/types/embed.ts builds it): the SDK's declarations as one
 * file, and the TypeScript compiler with the files it needs, unpacked on
 * first use to `$XDG_CACHE_HOME/atomic/typescript-<version>-<hash>/`
 * (default ~/.cache). The folder is written under a temporary name and
 * renamed into place, so a crash never leaves half of it. Its hash is
 * checked when it is unpacked and recorded with the executable's size,
 * mtime and inode; a copy that differs from them is unpacked again, never
 * run. Run from source (`bun src/main.ts`), the declarations are
 * generated on the spot and the project's own compiler is used.
 * docs/design/types-and-check.md describes the whole.
 */

import { chmodSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { readEnv } from "../../shared/config/environment.ts";
import { UsageError } from "../../shared/errors.ts";
import { isCompiled } from "../../shared/self-exec.ts";
import * as embeds from "./build-embeds.ts";


/** A compiler ready to run: its executable and the folder whose node_modules/@types a check reads. */
export interface Compiler {
  tsc: string;
  typesRoot: string;
  version: string;
}

const SOURCE_ROOT = join(import.meta.dir, "..", "..", "..");

/** What the binary embeds; undefined when run from source. */
function embedded(): { declarations: string; compiler: typeof embeds.compiler } | undefined {
  return isCompiled() && embeds.declarations !== null ? { declarations: embeds.declarations, compiler: embeds.compiler } : undefined;
}

/** The SDK's declarations (the text of `.atomic/types/atomic.d.ts`). */
export async function sdkDeclarations(): Promise<string> {
  const e = embedded();
  if (e) return Bun.file(e.declarations).text();
  const r = Bun.spawnSync([process.execPath, join(SOURCE_ROOT, "scripts", "types", "declarations.ts")], { stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`could not generate the SDK's declarations: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

/**
 * The declarations as a file for the compiler: written once per content to the cache (a check of a small
 * workflow would otherwise spend a good part of its time writing 650 KB).
 */
export async function declarationsFile(): Promise<string> {
  const text = await sdkDeclarations();
  const path = join(cacheDir(), `atomic-${new Bun.CryptoHasher("sha256").update(text).digest("hex").slice(0, 16)}.d.ts`);
  try {
    statSync(path);
  } catch {
    mkdirSync(dirname(path), { recursive: true });
    const scratch = `${path}.${process.pid}.tmp`;
    writeFileSync(scratch, text);
    renameSync(scratch, path);
  }
  return path;
}

function cacheDir(): string {
  return join(readEnv("XDG_CACHE_HOME") || join(readEnv("HOME") || homedir(), ".cache"), "atomic");
}

function sha256(...paths: string[]): string {
  const h = new Bun.CryptoHasher("sha256");
  for (const p of paths) h.update(readFileSync(p));
  return h.digest("hex");
}

/** The size, mtime and inode of a file: what it was when its hash was taken. */
function stamp(path: string): string {
  const s = statSync(path, { bigint: true });
  return `${s.size}:${s.mtimeNs}:${s.ino}`;
}

/**
 * True when `dir` holds the unpacked compiler of hash `sha256`: its marker names that hash, taken when it was
 * unpacked, and the executable is still the very file that was hashed then (same size, mtime and inode; hashing
 * 25 MB on every check would cost more than the check of a small workflow).
 */
function intact(dir: string, sha256: string): boolean {
  try {
    const [hash, was] = readFileSync(join(dir, "sha256"), "utf8").split(" ");
    return hash === sha256 && was === stamp(join(dir, "tsc"));
  } catch {
    return false;
  }
}

/** The compiler, unpacked once to the cache; a clear error when this build carries none. */
export async function compiler(): Promise<Compiler> {
  const e = embedded();
  if (!e) {
    const pkg = join(SOURCE_ROOT, "node_modules", "@typescript", `typescript-${process.platform}-${process.arch}`, "lib", "tsc");
    return { tsc: pkg, typesRoot: SOURCE_ROOT, version: "source" };
  }
  if (!e.compiler) {
    throw new UsageError("no_compiler", `this build of atomic (${process.platform}-${process.arch}) carries no TypeScript compiler`, {
      hint: "use the linux-x64 build for `atomic check`, or type-check with your project's own tsc after `atomic init`",
    });
  }
  const c = e.compiler;
  const dir = join(cacheDir(), `typescript-${c.version}-${c.sha256.slice(0, 16)}`);
  const tsc = join(dir, "tsc");
  if (intact(dir, c.sha256)) return { tsc, typesRoot: dir, version: c.version };
  mkdirSync(dirname(dir), { recursive: true });
  const scratch = mkdtempSync(`${dir}.unpacking-`);
  try {
    writeFileSync(join(scratch, "tsc"), Bun.zstdDecompressSync(new Uint8Array(await Bun.file(c.exe).arrayBuffer())));
    chmodSync(join(scratch, "tsc"), 0o755);
    const packed = new Uint8Array(await Bun.file(c.files).arrayBuffer());
    writeFileSync(join(scratch, "files.json.gz"), packed);
    const files = JSON.parse(new TextDecoder().decode(Bun.gunzipSync(packed))) as Record<string, string>;
    for (const [rel, text] of Object.entries(files)) {
      mkdirSync(dirname(join(scratch, rel)), { recursive: true });
      writeFileSync(join(scratch, rel), text);
    }
    const digest = sha256(join(scratch, "tsc"), join(scratch, "files.json.gz"));
    if (digest !== c.sha256) throw new Error(`the unpacked compiler's hash ${digest} is not the embedded ${c.sha256}`);
    writeFileSync(join(scratch, "sha256"), `${digest} ${stamp(join(scratch, "tsc"))}`);
    // Another process may have unpacked it meanwhile: its copy is as good, and may be in use, so it stays.
    // A damaged copy is moved aside first (a rename, so no process ever sees half of a folder).
    if (intact(dir, c.sha256)) {
      rmSync(scratch, { recursive: true, force: true });
      return { tsc, typesRoot: dir, version: c.version };
    }
    const aside = `${scratch}.damaged`;
    try {
      renameSync(dir, aside);
    } catch {
      // there was none
    }
    rmSync(aside, { recursive: true, force: true });
    renameSync(scratch, dir);
  } catch (err) {
    rmSync(scratch, { recursive: true, force: true });
    // Another process unpacked it at the same moment: theirs is as good.
    if (intact(dir, c.sha256)) return { tsc, typesRoot: dir, version: c.version };
    throw err;
  }
  return { tsc, typesRoot: dir, version: c.version };
}

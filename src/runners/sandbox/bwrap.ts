/**
 * Bubblewrap (bwrap), found and tried at run time, and the command line
 * that puts one stage process inside it (docs/design/sandbox.md).
 *
 * `sandboxProblem()` says why no sandbox can be made here, in one sentence
 * with the fix (bwrap not on PATH; bwrap there but unable to make its
 * namespaces, as when unprivileged user namespaces are off), or nothing.
 * It tries bwrap once per process and remembers the answer; a working
 * bwrap is also remembered across processes (`bwrap-works` in the user's
 * runtime directory), for as long as what the answer depends on holds:
 * the same bwrap file, boot, user, user namespace and namespace sysctls.
 * Trying it costs as much as a sandboxed stage's start (a bwrap), and the
 * root and every worker of every run would pay it again. A stale "works"
 * can only cost a clearer sentence: the stage's command still runs inside
 * bwrap or not at all (bwrap's own error then ends it).
 *
 * `bwrapArgs` builds, in this order (a later mount lies over an earlier):
 * the whole system read-only; fresh /dev, /proc (of a new PID namespace)
 * and an empty /tmp (and TMPDIR at its own path); the user's home (both $HOME and the account's), the
 * atomic home and the artifact store replaced by empty directories; then
 * what the stage may see: `read` paths read-only, `write` paths, the cwd
 * and the runner's own files writable, a CLI's auth file among them
 * read-only again; last, every credential path that a
 * visible path would show is covered again. Every namespace is new (user,
 * PID, IPC, UTS, cgroup, network; the network only stays shared for
 * `network: "open"`), and the sandbox dies with its parent: when the
 * stage's first process ends, bwrap's init ends and the kernel kills
 * whatever the stage left behind.
 */

import { createHash } from "node:crypto";
import { existsSync, lstatSync, readFileSync, readlinkSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { homedir, userInfo } from "node:os";
import { dirname, isAbsolute, join, normalize, resolve, sep } from "node:path";
import { CREDENTIAL_PATHS, type SandboxProblem, type SandboxSpec } from "../../shared/sandbox-option.ts";
import { readEnv, systemValue } from "../../shared/config/environment.ts";
import { ensurePrivateDir, runtimeDir } from "../../shared/runtime-dir.ts";

const INSTALL_HINT = 'install bubblewrap (Debian, Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap), or set sandbox: "off" on the stage';
const USERNS_HINT =
  'enable unprivileged user namespaces (sudo sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0), or set sandbox: "off" on the stage';
/** bwrap's ENOSPC: the count of user namespaces is at its limit (0 where they are turned off by `user.max_user_namespaces`, the way RHEL does). */
const USERNS_LIMIT_HINT =
  'raise the limit of user namespaces (sudo sysctl user.max_user_namespaces=15000; 0 turns them off), or set sandbox: "off" on the stage';

let tried: { bwrap?: string; problem?: SandboxProblem; path: string | undefined } | undefined;

/** bwrap's path on PATH, or undefined. */
export function bwrapPath(): string | undefined {
  return Bun.which("bwrap", { PATH: systemValue("PATH") ?? "" }) ?? undefined;
}

/**
 * Why a stage cannot be sandboxed here, or undefined when bwrap works (tried once per PATH, and remembered while it
 * works; `fresh` tries it again whatever was remembered, as `atomic doctor` does).
 */
export function sandboxProblem(opts: { fresh?: boolean } = {}): SandboxProblem | undefined {
  const path = systemValue("PATH");
  if (tried && tried.path === path && !opts.fresh) return tried.problem;
  const bwrap = bwrapPath();
  let problem: SandboxProblem | undefined;
  if (!bwrap) {
    problem = { message: "bubblewrap (bwrap) is not installed on this machine (nor on PATH), so the stage cannot be sandboxed", hint: INSTALL_HINT };
  } else if (opts.fresh || !rememberedWorking(bwrap)) {
    const r = Bun.spawnSync([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "/bin/true"], { stdout: "ignore", stderr: "pipe" });
    if (r.exitCode !== 0) {
      const why = r.stderr.toString("utf8").trim().split("\n")[0]?.replace(/^bwrap: /, "") || `exit code ${r.exitCode}`;
      problem = { message: `bubblewrap cannot create a sandbox here (${why}), so the stage cannot be sandboxed`, hint: /ENOSPC|max_\S*namespaces/.test(why) ? USERNS_LIMIT_HINT : USERNS_HINT };
    } else {
      rememberWorking(bwrap);
    }
  }
  tried = { ...(bwrap ? { bwrap } : {}), ...(problem ? { problem } : {}), path };
  return problem;
}

/** The file that says bwrap worked, and the digest of what that depends on (undefined when it cannot be known). */
function workingRecord(bwrap: string): { file: string; digest: string } | undefined {
  const read = (p: string) => {
    try {
      return readFileSync(p, "utf8").trim();
    } catch {
      return "";
    }
  };
  try {
    const real = realpathSync(bwrap);
    const st = statSync(real);
    const facts = [
      real, st.ino, st.size, st.mtimeMs, read("/proc/sys/kernel/random/boot_id"), process.getuid?.(), statSync("/proc/self/ns/user").ino,
      ...["kernel/unprivileged_userns_clone", "user/max_user_namespaces", "kernel/apparmor_restrict_unprivileged_userns"].map((s) => read(`/proc/sys/${s}`)),
    ];
    const home = resolve(readEnv("ATOMIC_HOME") ?? resolve(homedir(), ".atomic"));
    return { file: join(runtimeDir(home), "bwrap-works"), digest: createHash("sha256").update(facts.join("\n")).digest("hex") };
  } catch {
    return undefined;
  }
}

function rememberedWorking(bwrap: string): boolean {
  const record = workingRecord(bwrap);
  if (!record) return false;
  try {
    return readFileSync(record.file, "utf8") === record.digest;
  } catch {
    return false;
  }
}

function rememberWorking(bwrap: string): void {
  const record = workingRecord(bwrap);
  if (!record) return;
  try {
    ensurePrivateDir(dirname(record.file), "the runtime directory");
    writeFileSync(record.file, record.digest, { mode: 0o600 });
  } catch {
    // not remembered: the next process tries bwrap again
  }
}

export interface SandboxLayout {
  spec: SandboxSpec;
  cwd: string;
  /** Paths hidden besides the user's home: the atomic home, the artifact store. */
  hidden: readonly string[];
  /** The runner's own files the stage writes (its artifact directory, a CLI's state directory). */
  writable?: readonly string[];
  /** The runner's own files the stage reads (an earlier session, the CLI's auth file). */
  readable?: readonly string[];
  /** Credential paths this stage may see after all (the CLI's own auth file). */
  allowed?: readonly string[];
  /** Paths inside a writable one bound read-only again (the CLI's auth file in its state directory). */
  readOnly?: readonly string[];
  /** The user's home as the stage's environment names it. */
  home: string;
  /** The cwd read-only (a CLI agent whose tools only read). */
  cwdReadOnly?: boolean;
  /** The stage's TMPDIR: an empty directory at the same path inside (else /tmp). */
  tmpdir?: string;
  /** Extra environment set inside. */
  setenv?: Record<string, string>;
}

/** The bwrap arguments (without bwrap itself) that run `argv` sandboxed as `layout` says. */
export function bwrapArgs(layout: SandboxLayout, argv: readonly string[]): string[] {
  const { spec } = layout;
  const a: string[] = ["--unshare-all", ...(spec.network === "open" ? ["--share-net"] : []), "--die-with-parent"];
  a.push("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp");
  const homes = [...new Set([layout.home, accountHome()].filter((h): h is string => !!h && h !== "/" && existsSync(h)))];
  const hidden = [...homes, ...layout.hidden.filter((p) => existsSync(p))];
  for (const dir of hidden) a.push("--tmpfs", dir);
  // TMPDIR keeps its path, empty and private like /tmp (a program that compares its files' paths with it, as
  // codex does, sees what it sees outside), unless it is / or holds, or lies in, a path the stage sees.
  const shown = [layout.cwd, ...spec.read, ...spec.write, ...(layout.readable ?? []), ...(layout.writable ?? [])];
  const overlaps = (t: string) => shown.some((p) => p === t || p.startsWith(t + sep) || t.startsWith(p + sep));
  const tmp = layout.tmpdir && isAbsolute(layout.tmpdir) ? normalize(layout.tmpdir).replace(/(.)\/+$/, "$1") : undefined;
  const tmpdir = tmp && tmp !== "/" && tmp !== "/tmp" && !overlaps(tmp) ? tmp : "/tmp";
  if (tmpdir !== "/tmp") a.push("--tmpfs", tmpdir);
  const visible: string[] = [];
  const covered = ["/tmp", ...hidden];
  const bind = (flag: string, p: string) => {
    if (!existsSync(p)) return;
    // bwrap cannot mount onto a symbolic link: the real path is bound, and a link that lies in an emptied
    // directory (the home, /tmp) is made again there; elsewhere the read-only system still holds it.
    const real = realpathSync(p);
    a.push(flag, real, real);
    visible.push(p, real);
    if (real !== p && lstatSync(p).isSymbolicLink() && covered.some((c) => p.startsWith(c + sep))) a.push("--symlink", readlinkSync(p), p);
  };
  for (const p of layout.readable ?? []) bind("--ro-bind", p);
  for (const p of spec.read) bind("--ro-bind", p);
  for (const p of layout.writable ?? []) bind("--bind", p);
  for (const p of spec.write) bind("--bind", p);
  bind(layout.cwdReadOnly ? "--ro-bind" : "--bind", layout.cwd);
  for (const p of layout.readOnly ?? []) if (visible.some((v) => p.startsWith(v + sep))) bind("--ro-bind", p);
  // A visible path must not show a credential path under it (read: ["~"] shows the home, not its keys).
  const allowed = new Set(layout.allowed ?? []);
  for (const home of homes) {
    for (const c of CREDENTIAL_PATHS) {
      const p = join(home, c);
      if (allowed.has(p) || !existsSync(p) || !visible.some((v) => p === v || p.startsWith(v + sep))) continue;
      if (statSync(p).isDirectory()) a.push("--tmpfs", p);
      else a.push("--ro-bind", "/dev/null", p);
    }
  }
  for (const [k, v] of Object.entries({ TMPDIR: tmpdir, ...layout.setenv })) a.push("--setenv", k, v);
  a.push("--chdir", layout.cwd, "--", ...argv);
  return a;
}

function accountHome(): string | undefined {
  try {
    return userInfo().homedir;
  } catch {
    return undefined;
  }
}

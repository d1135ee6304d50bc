/**
 * Builds the single binary: `bun scripts/build.ts [OUTFILE] [--target T]`
 * (OUTFILE defaults to dist/atomic; T is one of Bun's compile targets such
 * as bun-linux-arm64, default this machine's). scripts/release.sh builds
 * every platform with it. `--without-tracing` builds a binary whose
 * tracing is bypassed (loadTracer answers "off" without reading any
 * setting): the baseline of bench/tracing-off.ts, never shipped.
 *
 * Flags (see docs/design/platform.md): the binary must not read bunfig.toml
 * or .env from the user's directory (a preload script would run inside
 * atomic; .env secrets would leak into process.env), NODE_ENV is fixed to
 * production (a binary built from inside `bun test` would otherwise
 * inherit "test"), and --bytecode (which needs ESM) halves start-up time.
 * The commit, build time and target are fixed in too (`atomic version
 * --json`).
 */

import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { ENTRY_POINTS } from "../src/shared/entry-points.ts";
import { embeddedTypescriptModule } from "./types/embed.ts";

const root = join(import.meta.dir, "..");
const { values, positionals } = parseArgs({ args: process.argv.slice(2), options: { target: { type: "string" }, "without-tracing": { type: "boolean" } }, allowPositionals: true });
const outfile = positionals[0] ?? join(root, "dist", "atomic");
const target = values.target ?? `bun-${process.platform}-${process.arch}`;
mkdirSync(dirname(outfile), { recursive: true });
// The compiler writes a .map file per bundle and chunk beside its output; the binary embeds its source maps
// (stack traces of --verbose name src/ files without them), so it is built in a scratch folder next to OUTFILE
// and only the binary is kept.
const scratch = mkdtempSync(join(dirname(outfile), `.${basename(outfile)}.build-`));

/** The commit this tree is at ("-dirty" when it has changes), or "unknown" outside a git checkout. */
function commit(): string {
  const head = Bun.spawnSync(["git", "rev-parse", "HEAD"], { cwd: root, stdout: "pipe", stderr: "ignore" });
  if (head.exitCode !== 0) return "unknown";
  const dirty = Bun.spawnSync(["git", "status", "--porcelain", "--untracked-files=no"], { cwd: root, stdout: "pipe", stderr: "ignore" });
  return `${head.stdout.toString().trim()}${dirty.stdout.toString().trim() ? "-dirty" : ""}`;
}

/**
 * playwright-core (the design builtin's browser, src/sdk/playwright.ts) goes into the binary as one file bundled
 * apart, embedded as a file and imported from the binary's own file system when a page is first captured: no
 * bytecode and no source map of it, which bundled with the rest cost 18.2 MB of the binary's 154.9 (measured
 * 6 December 2026: 4.0 MB of its code, the rest bytecode and map). Bytecode speeds a process's start-up, which
 * never loads it; its errors reach users as capturePage's one-sentence messages, not its own stack frames.
 */
const PLAYWRIGHT_JSON_READ = /require\(import_path\d*\.default\.join\(packageRoot, "(package|browsers)\.json"\)\)/g;

/** `--without-tracing`: engine/tracing/tracing.ts with a loadTracer that reads nothing and answers "off". */
const tracingBypassed: Bun.BunPlugin = {
  name: "atomic-without-tracing",
  setup(build) {
    build.onLoad({ filter: /[\\/]src[\\/]engine[\\/]tracing[\\/]tracing\.ts$/ }, async ({ path }) => {
      const code = await Bun.file(path).text();
      const bypassed = code.replace(/\nexport function loadTracer\([\s\S]*$/, "\nexport function loadTracer(_config?: TelemetryConfig): Promise<Tracer | undefined> {\n  return Promise.resolve(undefined);\n}\n");
      if (bypassed === code) throw new Error("--without-tracing: engine/tracing/tracing.ts has no loadTracer at its end to replace");
      return { contents: bypassed, loader: "ts" };
    });
  },
};

/**
 * playwright-core reads its package.json and browsers.json at load time with `require(join(packageRoot, …))`,
 * packageRoot derived from __dirname, which the bundler fixes to the build machine's node_modules: a binary run
 * anywhere else (or in a sandbox that hides that path) failed on its first page capture. Both files are put
 * into the bundle as literals instead.
 */
const playwrightJsonInlined: Bun.BunPlugin = {
  name: "atomic-playwright-json",
  setup(build) {
    build.onLoad({ filter: /[\\/]playwright-core[\\/]lib[\\/][^\\/]+\.js$/ }, async ({ path }) => {
      const code = await Bun.file(path).text();
      const inlined = code.replace(PLAYWRIGHT_JSON_READ, (_all, name: string) => `(${readFileSync(join(root, "node_modules", "playwright-core", `${name}.json`), "utf8")})`);
      return { contents: inlined, loader: "js" };
    });
  },
};

async function embeddedPlaywrightModule(scratch: string): Promise<string> {
  const out = join(scratch, "playwright");
  const built = await Bun.build({
    entrypoints: [join(root, "node_modules", "playwright-core", "index.mjs")],
    outdir: out,
    target: "bun",
    format: "esm",
    minify: true,
    define: { "process.env.NODE_ENV": '"production"' },
    plugins: [playwrightJsonInlined],
  });
  if (!built.success || built.outputs.length !== 1) {
    for (const log of built.logs) console.error(log);
    throw new Error(`bundling playwright-core gave ${built.outputs.length} files, not one`);
  }
  if (/packageRoot,\s*"(package|browsers)\.json"/.test(await built.outputs[0]!.text())) throw new Error("playwright-core still reads its package.json or browsers.json from node_modules at run time");
  const file = JSON.stringify(built.outputs[0]!.path);
  return `import path from ${file} with { type: "file" };\nconst m = await import(path);\nexport const { chromium, firefox, webkit, devices, errors, selectors, request } = m;\nexport default m.default;\n`;
}

let result: Bun.BuildOutput;
try {
  // The SDK's declarations and the TypeScript compiler for init, types and check (scripts/types/embed.ts).
  const version = (JSON.parse(await Bun.file(join(root, "package.json")).text()) as { version: string }).version;
  const typescriptModule = embeddedTypescriptModule(target, scratch, version);
  const playwrightModule = await embeddedPlaywrightModule(scratch);
  result = await Bun.build({
    plugins: [
      {
        name: "atomic-build-embeds",
        setup(build) {
          build.onLoad({ filter: /[\\/]src[\\/]cli[\\/]project[\\/]build-embeds\.ts$/ }, () => ({ contents: typescriptModule, loader: "ts" }));
          // ink loads React's devtools only when DEV=true and the optional react-devtools-core is installed (it is
          // not); the bundler still follows that import, so it resolves to a module that exports nothing.
          build.onResolve({ filter: /^react-devtools-core$/ }, () => ({ path: "react-devtools-core", namespace: "atomic-absent" }));
          build.onLoad({ filter: /.*/, namespace: "atomic-absent" }, () => ({ contents: "export default undefined;", loader: "js" }));
          build.onResolve({ filter: /^playwright-core$/ }, () => ({ path: "playwright-core", namespace: "atomic-playwright" }));
          build.onLoad({ filter: /.*/, namespace: "atomic-playwright" }, () => ({ contents: playwrightModule, loader: "js" }));
        },
      },
      ...(values["without-tracing"] ? [tracingBypassed] : []),
    ],
    // Each a bundle of its own in the binary (src/shared/entry-points.ts says why).
    entrypoints: ENTRY_POINTS.map((f) => join(root, "src", f)),
    // Bundles keep their paths under src/ (importEntry finds them there). Named, not inferred: Bun 1.4.4 infers
    // the common directory of up to 8 entry points, and the repository's root for 9 (measured).
    root: join(root, "src"),
    compile: {
      outfile: join(scratch, basename(outfile)),
      target: target as Bun.Build.CompileTarget,
      autoloadBunfig: false,
      autoloadDotenv: false,
    },
    format: "esm",
    // Modules shared by several entry points go to chunks of their own instead of a copy in each bundle (4.5 MB
    // less in the binary, measured); names are minified but kept where code reads them (error classes).
    splitting: true,
    bytecode: true,
    minify: { syntax: true, whitespace: true, identifiers: true, keepNames: true },
    sourcemap: "linked",
    define: {
      "process.env.NODE_ENV": '"production"',
      ATOMIC_BUILD_COMMIT: JSON.stringify(commit()),
      ATOMIC_BUILD_DATE: JSON.stringify(new Date().toISOString().replace(/\.\d+Z$/, "Z")),
      ATOMIC_BUILD_TARGET: JSON.stringify(target),
    },
  });
  if (result.success) renameSync(join(scratch, basename(outfile)), outfile);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
if (!result.success) {
  for (const log of result.logs) console.error(log);
  process.exit(1);
}
console.log(`built ${outfile}`);

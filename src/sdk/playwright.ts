/**
 * playwright-core in a bundle of its own (an entry point: src/shared/entry-points.ts says why). It is about
 * 18 MB of code with its own ajv; capturePage (browser.ts) loads it through importEntry on first use, so no
 * other bundle holds a copy and a process that never captures a page never loads it. In the binary,
 * scripts/build.ts resolves "playwright-core" here to one prebuilt file it embeds (about 4 MB, without bytecode
 * or source map), so this bundle is a few lines that import that file.
 */

export { chromium } from "playwright-core";

/**
 * The test kit as one bundle of the binary (src/shared/entry-points.ts):
 * what `atomic test` gives the test files it runs as the modules "atomic"
 * (`sdk`) and "atomic/testing" (`testing`), both from this one bundle, so
 * the workflows a test imports and the engine testRun drives share one
 * SDK. cli/commands/test.ts says how the bundle reaches the test process.
 */

export * as sdk from "../sdk/index.ts";
export * as testing from "./index.ts";

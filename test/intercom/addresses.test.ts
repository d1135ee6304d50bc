/** Stage addresses and patterns (src/intercom/addresses.ts). */

import { describe, expect, test } from "bun:test";
import { closeMatches } from "../../src/shared/close-matches.ts";
import { compileGlob, isPattern, literalPrefix, matchesPath, parseStagePath, splitAddress } from "../../src/intercom/addresses.ts";
import { AtomicError } from "../../src/shared/errors.ts";

describe("stage paths and patterns", () => {
  test("* stays within one name, ** crosses names, ? is one character, [..] a set", () => {
    expect(matchesPath("review/*", "review/security")).toBe(true);
    expect(matchesPath("review/*", "review/deep/security")).toBe(false);
    expect(matchesPath("review/**", "review/deep/security")).toBe(true);
    expect(matchesPath("**/security", "security")).toBe(true);
    expect(matchesPath("**/security", "a/b/security")).toBe(true);
    expect(matchesPath("test-?", "test-1")).toBe(true);
    expect(matchesPath("test-?", "test-10")).toBe(false);
    expect(matchesPath("test-[12]", "test-2")).toBe(true);
    expect(matchesPath("test-[!12]", "test-2")).toBe(false);
    expect(matchesPath("a.b", "axb")).toBe(false);
    expect(matchesPath("lint", "lint")).toBe(true);
    expect(matchesPath("lint", "lint2")).toBe(false);
  });

  test("patterns and their literal prefixes", () => {
    expect(isPattern("review/*")).toBe(true);
    expect(isPattern("review/security")).toBe(false);
    expect(literalPrefix("review/sec*")).toBe("review/sec");
    expect(literalPrefix("*")).toBe("");
    expect(compileGlob("a/*")).toBe(compileGlob("a/*"));
  });

  test("paths are normalized; empty names and unclosed sets are refused as usage errors", () => {
    expect(parseStagePath(" /review/security/ ")).toBe("review/security");
    for (const bad of ["", "  ", "a//b", "te[st"]) {
      let err: unknown;
      try {
        parseStagePath(bad);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(AtomicError);
      expect((err as AtomicError).code).toBe("bad_stage_path");
    }
  });

  test("an address splits at its first colon", () => {
    expect(splitAddress("01abc:review/x")).toEqual({ run: "01abc", path: "review/x" });
    expect(splitAddress("review/x")).toEqual({ run: undefined, path: "review/x" });
  });

  test("close matches name the nearest paths first", () => {
    const paths = ["review/security", "review/style", "lint", "test", "deploy"];
    expect(closeMatches("review/securty", paths)[0]).toBe("review/security");
    expect(closeMatches("tset", paths)).toContain("test");
    expect(closeMatches("zzzzzzzz", paths)).toEqual([]);
  });
});

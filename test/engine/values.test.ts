/**
 * Step argument digests (values.ts). A digest is the 64-bit wyhash of the
 * arguments' JSON, written "x" and 16 hex digits; journals recorded before
 * hold the same hash in base 36. Replay compares without writing digests
 * out (digestMatches, sameArgs), and that comparison must agree exactly
 * with comparing the written digests, in either form, or recorded journals
 * would replay differently.
 */

import { describe, expect, test } from "bun:test";
import { argsHash, argsLike, digestArgs, digestMatches, formatDigest, sameArgs } from "../../src/engine/values.ts";

const U64 = 2n ** 64n;

/** A deterministic stream of 64-bit values (xorshift64*), so a failure reproduces. */
function* values(count: number): Generator<bigint> {
  let x = 0x9e3779b97f4a7c15n;
  for (let i = 0; i < count; i++) {
    x ^= x >> 12n;
    x ^= (x << 25n) % U64;
    x ^= x >> 27n;
    yield (x * 0x2545f4914f6cdd1dn) % U64;
  }
}

const EDGES = [
  0n, 1n, 15n, 16n, 35n, 36n, 1295n, 1296n,
  36n ** 6n - 1n, 36n ** 6n, 36n ** 7n - 1n, 36n ** 7n, 36n ** 12n - 1n, 36n ** 12n,
  2n ** 16n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 48n - 1n, 2n ** 48n, 2n ** 53n, 2n ** 63n, U64 - 1n,
];

/** The form journals recorded before the current one hold. */
const legacy = (h: bigint) => h.toString(36);

describe("argument digests", () => {
  test("a digest is x and the hash's 16 hex digits", () => {
    const h = Bun.hash(JSON.stringify({ n: 1 })) as bigint;
    expect(digestArgs({ n: 1 })).toBe(`x${h.toString(16).padStart(16, "0")}`);
    expect(digestArgs(undefined)).toBe(formatDigest(Bun.hash("undefined") as bigint));
    expect(formatDigest(1n)).toBe("x0000000000000001");
    expect(formatDigest(U64 - 1n)).toBe("xffffffffffffffff");
    expect(formatDigest(argsHash([1, "a"]))).toBe(digestArgs([1, "a"]));
  });

  test("digestMatches agrees with comparing written digests, in both forms", () => {
    const hashes = [...EDGES, ...values(20_000), ...Array.from({ length: 2_000 }, (_, i) => argsHash(i))];
    for (const h of hashes) {
      for (const digest of [formatDigest(h), legacy(h)]) {
        if (!digestMatches(digest, h)) throw new Error(`${digest} does not match its own hash ${h}`);
        for (const other of [h ^ 1n, h ^ (1n << 31n), h ^ (1n << 32n), h ^ (1n << 63n), (h + 1n) % U64, (h + U64 - 1n) % U64]) {
          if (digestMatches(digest, other)) throw new Error(`${digest} (hash ${h}) matches ${other}`);
        }
      }
    }
  });

  test("digestMatches refuses what neither form writes", () => {
    const cases = [
      "", "0a", "00", "A", "1A", " 1", "1 ", "-1", "1.5", "é", "zzzzzzzzzzzzzz",
      "x000000000000000", "x00000000000000000", "X0000000000000000", "y0000000000000000", "x000000000000000g", "x00000000000000A0",
    ];
    for (const digest of cases) for (const h of EDGES) expect(digestMatches(digest, h)).toBe(false);
    // 13 base-36 digits can exceed 2^64: such a digest matches no hash (not even the value modulo 2^64).
    expect(legacy(U64 - 1n)).toBe("3w5e11264sgsf");
    expect(digestMatches("3w5e11264sgsg", 0n)).toBe(false);
    expect(digestMatches("zzzzzzzzzzzzz", (36n ** 13n - 1n) % U64)).toBe(false);
    expect(digestMatches("0", 0n)).toBe(true);
    expect(digestMatches("x0000000000000000", 0n)).toBe(true);
  });

  test("sameArgs: equal strings, or one hash in the two forms", () => {
    for (const h of [...EDGES, ...values(2_000)]) {
      expect(sameArgs(legacy(h), formatDigest(h))).toBe(true);
      expect(sameArgs(formatDigest(h), legacy(h))).toBe(true);
      expect(sameArgs(legacy(h), formatDigest(h ^ 1n))).toBe(false);
      expect(sameArgs(formatDigest(h), formatDigest(h ^ (1n << 40n)))).toBe(false);
    }
    // Arguments that are not digests (a sleep's duration) compare as strings.
    expect(sameArgs("20", "20")).toBe(true);
    expect(sameArgs("20", "30")).toBe(false);
    expect(sameArgs("edited", formatDigest(5n))).toBe(false);
    expect(sameArgs(formatDigest(5n), "edited")).toBe(false);
  });

  test("argsLike writes what is asked for in the form of what was recorded", () => {
    const h = argsHash({ n: 1 });
    expect(argsLike(h, legacy(7n))).toBe(legacy(h));
    expect(argsLike(h, formatDigest(7n))).toBe(formatDigest(h));
    expect(argsLike(h, "edited")).toBe(legacy(h));
    expect(argsLike(h, undefined)).toBe(formatDigest(h));
    expect(argsLike(formatDigest(h), legacy(7n))).toBe(legacy(h));
    expect(argsLike(formatDigest(h), formatDigest(7n))).toBe(formatDigest(h));
    expect(argsLike("20", "30")).toBe("20");
  });
});

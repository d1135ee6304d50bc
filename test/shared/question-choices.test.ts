/**
 * The one rule for a question's choices (ctx.ask and the ask_user tool):
 * 1 to 50 distinct, non-empty strings of at most 200 characters.
 */

import { expect, test } from "bun:test";
import { MAX_CHOICES, MAX_CHOICE_LENGTH, validChoices } from "../../src/shared/question-choices.ts";

test("valid choices: distinct non-empty strings, 1 to MAX_CHOICES, each at most MAX_CHOICE_LENGTH", () => {
  expect(validChoices(["yes", "no"])).toBe(true);
  expect(validChoices(Array.from({ length: MAX_CHOICES }, (_, i) => `c${i}`))).toBe(true);
  expect(validChoices(["x".repeat(MAX_CHOICE_LENGTH)])).toBe(true);
});

test("refused: not an array, empty, too many, a duplicate, a blank, a non-string, too long", () => {
  for (const bad of [
    "yes",
    [],
    Array.from({ length: MAX_CHOICES + 1 }, (_, i) => `c${i}`),
    ["a", "a"],
    ["a", "  "],
    ["a", 1],
    ["x".repeat(MAX_CHOICE_LENGTH + 1)],
  ]) {
    expect(validChoices(bad)).toBe(false);
  }
});

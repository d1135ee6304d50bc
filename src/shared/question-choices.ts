/**
 * The choices a question may offer, one rule for `ctx.ask` and the agents'
 * `ask_user` tool: 1 to MAX_CHOICES distinct, non-empty strings of at most
 * MAX_CHOICE_LENGTH characters each.
 */

export const MAX_CHOICES = 50;
export const MAX_CHOICE_LENGTH = 200;

export function validChoices(choices: unknown): choices is string[] {
  return (
    Array.isArray(choices) &&
    choices.length > 0 &&
    choices.length <= MAX_CHOICES &&
    choices.every((c) => typeof c === "string" && c.trim() !== "" && c.length <= MAX_CHOICE_LENGTH) &&
    new Set(choices).size === choices.length
  );
}

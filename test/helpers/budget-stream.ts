/**
 * The `--json` stream of a run under `--max-cost`, walked as the budget
 * tests read it (test/budget/budget-cap.test.ts, test/fleet/budget.test.ts):
 * spending is what ended stages recorded; the cap is reached at the
 * step_ended that got it there; the warning is the first "has used N% of
 * its cost budget".
 */

export type BudgetEvent = { type: string; name?: string; runId?: string; message?: string; status?: string; result?: { usage?: { costMicroUsd?: number } }; error?: { message: string } };

/** Total spent (micro-USD), and the indexes of the event that reached `capMicroUsd` and of the warning (-1: none). */
export function walkBudget(events: BudgetEvent[], capMicroUsd: number): { spent: number; capAt: number; warnAt: number } {
  let spent = 0;
  let capAt = -1;
  let warnAt = -1;
  events.forEach((e, i) => {
    if (e.type === "warning" && /has used \d+% of its cost budget/.test(e.message ?? "") && warnAt < 0) warnAt = i;
    if (e.type !== "step_ended") return;
    spent += e.result?.usage?.costMicroUsd ?? 0;
    if (capAt < 0 && spent >= capMicroUsd) capAt = i;
  });
  return { spent, capAt, warnAt };
}

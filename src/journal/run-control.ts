/**
 * The value of a run's control row (runs.control): what another process
 * asked the run's driver to do. Either a run-level action ("pause",
 * "unpause", "cancel"), or a per-stage request, `stage-pause:PATH` or
 * `stage-unpause:PATH` (PATH: the stage's path from the root run). A stage
 * request carries the run's own pause with it ("pause;stage-pause:PATH"
 * while the run is paused), so that the row keeps saying the run is paused
 * (run-status.ts) and the driver keeps it paused when it applies the stage
 * request. The driver records each value it applied (control_applied), which
 * is where a later drive finds the paused stages again.
 */

export type RunAction = "pause" | "unpause" | "cancel";

export interface ControlRequest {
  /** The run-level action; undefined for a stage request on a run that is not paused. */
  run?: RunAction;
  /** A per-stage request: the stage's path and whether it is to be paused. */
  stage?: { path: string; paused: boolean };
}

const STAGE = /^stage-(pause|unpause):(.+)$/s;

export function parseControl(value: string | null | undefined): ControlRequest {
  if (!value) return {};
  const [head, rest] = value.startsWith("pause;") ? ["pause" as const, value.slice("pause;".length)] : [undefined, value];
  const stage = STAGE.exec(rest);
  if (stage) return { ...(head ? { run: head } : {}), stage: { path: stage[2]!, paused: stage[1] === "pause" } };
  return value === "pause" || value === "unpause" || value === "cancel" ? { run: value } : {};
}

/** The control value asking to pause or unpause the stage at `path`, keeping the run's own pause. */
export function stageControl(runPaused: boolean, path: string, paused: boolean): string {
  return `${runPaused ? "pause;" : ""}stage-${paused ? "pause" : "unpause"}:${path}`;
}

/** A control value as people read it ("pause requested", "pause of stage review requested"), or undefined for none. */
export function controlText(value: string | null | undefined): string | undefined {
  const c = parseControl(value);
  const parts = [...(c.run ? [c.run] : []), ...(c.stage ? [`${c.stage.paused ? "pause" : "unpause"} of stage ${c.stage.path}`] : [])];
  return parts.length ? `${parts.join(", ")} requested` : value ? `${value} requested` : undefined;
}

/** The run itself is (asked to be) paused. */
export function runPausedBy(value: string | null | undefined): boolean {
  return parseControl(value).run === "pause";
}

/**
 * The stages paused by the control values a run's driver applied, oldest
 * first (the `action` of its control_applied records).
 */
export function pausedStages(applied: Iterable<string>): Set<string> {
  const paused = new Set<string>();
  for (const value of applied) {
    const stage = parseControl(value).stage;
    if (!stage) continue;
    if (stage.paused) paused.add(stage.path);
    else paused.delete(stage.path);
  }
  return paused;
}

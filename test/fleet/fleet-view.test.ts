/** How hosts look to people (journal/fleet-view.ts): lost after silence, and why a queued stage waits for a host. */

import { expect, test } from "bun:test";
import type { HostRecord } from "../../src/journal/fleet.ts";
import { ageText, queueWait, queueWaitText, shownHostState } from "../../src/journal/fleet-view.ts";

function host(hostId: string, queues: string[], state: HostRecord["state"], silentMs: number): HostRecord {
  return { hostId, version: "0", protocol: 1, schemaVersion: 6, queues, slots: 1, busy: 0, state, workdir: "/", pid: 1, refused: null, startedAt: 0, heartbeatAt: 0, silentMs };
}

test("a host is lost when silent past the threshold, unless it stopped", () => {
  expect(shownHostState(host("a", ["default"], "running", 9_000), 10_000)).toBe("running");
  expect(shownHostState(host("a", ["default"], "running", 11_000), 10_000)).toBe("lost");
  expect(shownHostState(host("a", ["default"], "draining", 11_000), 10_000)).toBe("lost");
  expect(shownHostState(host("a", ["default"], "stopped", 999_000), 10_000)).toBe("stopped");
});

test("why a stage waits: none ever, draining, or silent since the newest heartbeat of its queue's hosts; nothing with a live host", () => {
  const now = 1_000_000;
  expect(queueWait([], "gpu", now, 10_000)).toEqual({ queue: "gpu", kind: "never" });
  expect(queueWait([host("a", ["default"], "running", 0)], "gpu", now, 10_000)).toEqual({ queue: "gpu", kind: "never" });
  expect(queueWait([host("g", ["gpu"], "running", 500)], "gpu", now, 10_000)).toBeUndefined();
  expect(queueWait([host("g", ["gpu"], "draining", 500), host("h", ["gpu"], "stopped", 0)], "gpu", now, 10_000)).toEqual({ queue: "gpu", kind: "draining", hosts: ["g"] });
  const silent = queueWait([host("g", ["gpu"], "stopped", 40_000), host("h", ["gpu", "x"], "running", 30_000)], "gpu", now, 10_000)!;
  expect(silent).toEqual({ queue: "gpu", kind: "silent", lastSeenAt: now - 30_000 });
  expect(queueWaitText(silent, now)).toBe("waiting for a worker on queue gpu; none seen for 30 s");
  expect(queueWaitText(silent, now + 5_000)).toBe("waiting for a worker on queue gpu; none seen for 35 s");
  expect(queueWaitText({ queue: "gpu", kind: "never" })).toBe("waiting for a worker on queue gpu; no worker host has served it");
  expect(queueWaitText({ queue: "gpu", kind: "draining", hosts: ["g", "h"] })).toBe("waiting for a worker on queue gpu; its hosts g, h are draining");
});

test("ages in whole units", () => {
  expect([0, 59_999, 119_000, 120_000, 7_199_000, 7_200_000, 172_800_000].map(ageText)).toEqual(["0 s", "59 s", "119 s", "2 min", "119 min", "2 h", "2 d"]);
});

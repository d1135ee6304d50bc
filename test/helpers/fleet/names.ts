/**
 * What a fleet's parts are called, so that anyone can tell whose they are.
 *
 * A fleet's tag is `atf<owner pid, base 36>-<sequence, base 36>`: every
 * network namespace (`<tag>_h<i>`), link (`<tag>_b` the bridge, `<tag>_v<i>`
 * a host's veth end on the bridge), process (ATOMIC_TEST_FLEET_HOST=
 * `<tag>_h<i>` in its environment) and temp directory (`atomic-fleet-<tag>`,
 * holding an `owner` file) of a fleet is the tag or starts with the tag and
 * "_" (not a base-36 digit, so no tag is a prefix of another fleet's
 * names), and the stale sweep finds a dead owner's leftovers by name alone.
 * Interface names are at most 15 bytes: "atf" + 5 (a pid up to 2^22) + "-"
 * + 2 + "_v" + 2 = 15.
 */

export const TAG_PREFIX = "atf";
export const DIR_PREFIX = "atomic-fleet-";
export const HOST_MARKER = "ATOMIC_TEST_FLEET_HOST";

let sequence = 0;

export function newTag(owner = process.pid): string {
  return `${TAG_PREFIX}${owner.toString(36)}-${(++sequence).toString(36)}`;
}

export const bridgeName = (tag: string): string => `${tag}_b`;
export const vethName = (tag: string, index: number): string => `${tag}_v${index.toString(36)}`;
export const namespaceName = (tag: string, index: number): string => `${tag}_h${index}`;

/** Whether `name` (a namespace, link or marker value) is one of the fleet `tag`'s. */
export const belongsTo = (name: string, tag: string): boolean => name === tag || name.startsWith(`${tag}_`);

/** The owner pid a fleet name (tag, namespace, link, marker value) carries; undefined for names not ours. */
export function ownerOf(name: string): number | undefined {
  const m = /^atf([0-9a-z]{1,5})-[0-9a-z]+(_|$)/.exec(name);
  return m ? Number.parseInt(m[1]!, 36) : undefined;
}

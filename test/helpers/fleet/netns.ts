/**
 * The network of a fleet in network-namespace mode, all through `ip`
 * (iproute2): one bridge in the test's own namespace holding the first
 * address of a free /24, and per host a namespace with loopback up and one
 * end of a veth pair (called eth0 there, with the host's address and only
 * the /24's connected route: no default route, so a host can reach the
 * bridge, the other hosts and its own loopback, nothing else), the other end
 * a port of the bridge.
 *
 * Partition = the bridge-side end of the host's veth set down. The host's
 * eth0 keeps its address and routes and only loses carrier, so its packets
 * are dropped silently in both directions: open TCP connections stall and
 * retransmit, a new connect() gets no answer, as when a link beyond the
 * host fails. Every address of the fleet is pinned in every neighbour table
 * (`makeNetwork`), so no ARP lookup fails meanwhile (that would turn a new
 * connect() into EHOSTUNREACH after 3 s, as only a cut of the host's own
 * cable does). Setting eth0 itself down would instead remove its routes and
 * fail every send at once (ENETUNREACH), which no real cut does; a
 * blackhole route does the same, and a drop rule needs a firewall tool
 * this machine does not have. Heal = the end set up again: TCP's
 * retransmissions then deliver what was waiting, as across a cut that
 * heals before the connection times out.
 */

import { newTag, ownerOf } from "./names.ts";

export interface IpResult {
  ok: boolean;
  output: string;
}

export function ip(args: string[], opts: { allowFail?: boolean; stdin?: string } = {}): IpResult {
  const p = Bun.spawnSync(["ip", ...args], { stdin: opts.stdin !== undefined ? Buffer.from(opts.stdin) : "ignore", stdout: "pipe", stderr: "pipe" });
  const output = `${p.stdout.toString()}${p.stderr.toString()}`.trim();
  if (!p.success && !opts.allowFail) throw new Error(`ip ${args.join(" ")} failed (${p.exitCode}): ${output}`);
  return { ok: p.success, output };
}

/** Several `ip` commands in one process (`ip -batch -`): tens of them cost one spawn. */
export function ipBatch(lines: string[], namespace?: string): void {
  ip([...(namespace ? ["-n", namespace] : []), "-batch", "-"], { stdin: `${lines.join("\n")}\n` });
}

let support: { ok: true } | { ok: false; reason: string } | undefined;

/** Whether this process may make namespaces, bridges and veth pairs (tried once, with a probe it removes). */
export function netnsSupport(): { ok: true } | { ok: false; reason: string } {
  if (support) return support;
  const probeTag = newTag();
  if (process.getuid?.() !== 0) return (support = { ok: false, reason: "not running as root" });
  if (!Bun.which("ip")) return (support = { ok: false, reason: "there is no ip command (iproute2)" });
  const ns = `${probeTag}_probe`;
  const made = ip(["netns", "add", ns], { allowFail: true });
  if (!made.ok) return (support = { ok: false, reason: `ip netns add was refused: ${made.output}` });
  try {
    const veth = ip(["link", "add", `${probeTag}_p`, "type", "veth", "peer", "name", "eth0", "netns", ns], { allowFail: true });
    if (!veth.ok) return (support = { ok: false, reason: `a veth pair could not be made: ${veth.output}` });
    const bridge = ip(["link", "add", `${probeTag}_q`, "type", "bridge"], { allowFail: true });
    if (!bridge.ok) return (support = { ok: false, reason: `a bridge could not be made: ${bridge.output}` });
    return (support = { ok: true });
  } finally {
    ip(["link", "del", `${probeTag}_p`], { allowFail: true });
    ip(["link", "del", `${probeTag}_q`], { allowFail: true });
    ip(["netns", "del", ns], { allowFail: true });
  }
}

// ---------------------------------------------------------------- a free address range

type Prefix = { net: number; bits: number };

function parsePrefix(text: string): Prefix | undefined {
  const [addr, bitsText] = text.split("/");
  const parts = addr!.split(".").map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) return undefined;
  const bits = bitsText === undefined ? 32 : Number(bitsText);
  const value = ((parts[0]! << 24) | (parts[1]! << 16) | (parts[2]! << 8) | parts[3]!) >>> 0;
  return { net: bits === 0 ? 0 : (value & (~0 << (32 - bits))) >>> 0, bits };
}

function overlaps(a: Prefix, b: Prefix): boolean {
  const bits = Math.min(a.bits, b.bits);
  if (bits === 0) return true;
  const mask = (~0 << (32 - bits)) >>> 0;
  return ((a.net & mask) >>> 0) === ((b.net & mask) >>> 0);
}

const ROUTE_TYPES = new Set(["unicast", "local", "broadcast", "multicast", "throw", "unreachable", "prohibit", "blackhole", "nat", "anycast"]);

/** Every IPv4 prefix the machine's addresses and routes (all tables) use here; default routes aside (they claim nothing). */
export function usedPrefixes(): Prefix[] {
  const used: Prefix[] = [];
  for (const m of ip(["-4", "-o", "addr", "show"]).output.matchAll(/\binet (\S+)/g)) {
    const p = parsePrefix(m[1]!);
    if (p) used.push(p);
  }
  for (const line of ip(["-4", "route", "show", "table", "all"]).output.split("\n")) {
    const words = line.trim().split(/\s+/);
    const dest = ROUTE_TYPES.has(words[0]!) ? words[1] : words[0];
    if (!dest || dest === "default") continue;
    const p = parsePrefix(dest);
    if (p) used.push(p);
  }
  return used;
}

/** A random /24 of 10.0.0.0/8 or 100.64.0.0/10 that no address or route of the machine touches: its first three octets. */
export function freeSubnet(): string {
  const used = usedPrefixes();
  for (let attempt = 0; attempt < 200; attempt++) {
    const r = Math.floor(Math.random() * 65536);
    const base = Math.random() < 0.5 ? `10.${r >> 8}.${r & 255}` : `100.${64 + (r >> 10)}.${(r >> 2) & 255}`;
    const candidate = parsePrefix(`${base}.0/24`)!;
    if (!used.some((u) => overlaps(u, candidate))) return base;
  }
  throw new Error("no free /24 in 10.0.0.0/8 or 100.64.0.0/10 (every one tried is in use)");
}

/** Whether an address other than our bridge's lies in `base`.0/24 (another fleet's concurrent pick of the same range). */
export function subnetShared(base: string): boolean {
  const candidate = parsePrefix(`${base}.0/24`)!;
  const inRange = [...ip(["-4", "-o", "addr", "show"]).output.matchAll(/\binet (\S+)/g)].filter((m) => overlaps(parsePrefix(m[1]!)!, candidate));
  return inRange.length > 1;
}

// ---------------------------------------------------------------- making and removing

export interface NetnsHost {
  namespace: string;
  /** Its veth end on the bridge (what a partition sets down). */
  veth: string;
  address: string;
}

/** A locally administered MAC of the fleet: the subnet's octets, the host (0: the bridge) and the side. */
function mac(base: string, host: number, side: number): string {
  return ["02", ...base.split(".").map(Number), host, side].map((b) => b.toString(16).padStart(2, "0")).join(":");
}

/**
 * The bridge (up, with `<base>.1/24`) in this namespace and `count` hosts:
 * a namespace each, the veth pair (eth0 inside, with the host's address),
 * every link up. Every address of the fleet is pinned in every neighbour
 * table (permanent entries, MACs of our own choosing): no ARP ever crosses,
 * so a cut link is silence (no EHOSTUNREACH when ARP would fail 3 s in, as
 * only a cut of the host's own cable does), and a host's neighbour table
 * survives its carrier loss.
 */
export function makeNetwork(names: { bridge: string; namespace: (i: number) => string; veth: (i: number) => string }, base: string, count: number): NetnsHost[] {
  const hosts = Array.from({ length: count }, (_, i) => ({ namespace: names.namespace(i), veth: names.veth(i), address: `${base}.${i + 2}` }));
  const pinned = (dev: string, except?: number) => [
    ...(except === undefined ? [] : [`neigh replace ${base}.1 lladdr ${mac(base, 0, 0)} dev ${dev} nud permanent`]),
    ...hosts.flatMap((h, j) => (j === except ? [] : [`neigh replace ${h.address} lladdr ${mac(base, j + 1, 1)} dev ${dev} nud permanent`])),
  ];
  ipBatch([
    ...hosts.map((h) => `netns add ${h.namespace}`),
    `link add ${names.bridge} address ${mac(base, 0, 0)} type bridge`,
    `addr add ${base}.1/24 dev ${names.bridge}`,
    `link set ${names.bridge} up`,
    ...hosts.flatMap((h, i) => [
      `link add ${h.veth} address ${mac(base, i + 1, 2)} type veth peer name eth0 address ${mac(base, i + 1, 1)} netns ${h.namespace}`,
      `link set ${h.veth} master ${names.bridge}`,
      `link set ${h.veth} up`,
    ]),
    ...pinned(names.bridge),
  ]);
  hosts.forEach((h, i) => ipBatch(["link set lo up", `addr add ${h.address}/24 dev eth0`, "link set eth0 up", ...pinned("eth0", i)], h.namespace));
  return hosts;
}

/** Pids of the processes in a namespace (`ip netns pids`); empty when it is gone. */
export function namespacePids(namespace: string): number[] {
  const r = ip(["netns", "pids", namespace], { allowFail: true });
  return r.ok ? r.output.split(/\s+/).filter(Boolean).map(Number) : [];
}

export function setLink(link: string, state: "up" | "down"): void {
  ip(["link", "set", link, state]);
}

/** Removes a namespace (its eth0 and so the veth pair go with it once no process holds it) and links, ignoring what is gone. */
export function removeNetwork(namespaces: string[], links: string[]): void {
  const lines = [...namespaces.map((ns) => `netns del ${ns}`), ...links.map((l) => `link del ${l}`)];
  // One batch stops at its first error (something already gone), so each line alone when the batch fails.
  if (lines.length === 0 || ip(["-batch", "-"], { allowFail: true, stdin: `${lines.join("\n")}\n` }).ok) return;
  for (const line of lines) ip(line.split(" "), { allowFail: true });
}

/** This machine's namespaces and links whose names are a fleet's. */
export function fleetNetworkNames(): { namespaces: string[]; links: string[] } {
  if (!Bun.which("ip")) return { namespaces: [], links: [] };
  const namespaces = ip(["netns", "list"], { allowFail: true })
    .output.split("\n")
    .map((l) => l.split(" ")[0]!)
    .filter((n) => ownerOf(n) !== undefined);
  const links = [...ip(["-o", "link", "show"], { allowFail: true }).output.matchAll(/^\d+: ([^:@\s]+)/gm)].map((m) => m[1]!).filter((n) => ownerOf(n) !== undefined);
  return { namespaces, links };
}

/**
 * The broker's routing table: sessions by name and by group, and the asks
 * waiting for a reply. It knows connections only as opaque peers (`P`), so
 * it can be tested without sockets.
 *
 * A session name belongs to one connection at a time; a connection may
 * hold many names (a root run registers itself and each running stage).
 * When a connection goes, its names go, and every ask it made or was asked
 * ends (the asker is told `session_gone`).
 */

import { GROUP_PREFIX, type SessionInfo } from "./protocol/index.ts";

export interface Session<P> {
  name: string;
  groups: string[];
  peer: P;
  since: number;
  /** What the session is, when not its connection's role (a root's stage sessions are "stage"). */
  role?: string;
}

export interface PendingAsk<P> {
  /** The id the target replies to (unique in this broker). */
  routeId: string;
  asker: P;
  /** The id of the asker's request, which the answer repeats. */
  askerId: string;
  target: P;
  targetName: string;
  timer: ReturnType<typeof setTimeout>;
}

export class Routes<P> {
  private readonly sessions = new Map<string, Session<P>>();
  private readonly groups = new Map<string, Set<string>>();
  private readonly byPeer = new Map<P, Set<string>>();
  private readonly asks = new Map<string, PendingAsk<P>>();
  private nextAsk = 0;

  get sessionCount(): number {
    return this.sessions.size;
  }

  /** "taken" when another peer holds the name; registering a held name again updates its groups. */
  register(peer: P, name: string, groups: string[], role?: string): "ok" | "taken" {
    const held = this.sessions.get(name);
    if (held && held.peer !== peer) return "taken";
    if (held) this.removeName(name);
    const session: Session<P> = { name, groups: [...new Set(groups)], peer, since: held?.since ?? Date.now(), ...(role ? { role } : {}) };
    this.sessions.set(name, session);
    for (const g of session.groups) {
      let members = this.groups.get(g);
      if (!members) this.groups.set(g, (members = new Set()));
      members.add(name);
    }
    let names = this.byPeer.get(peer);
    if (!names) this.byPeer.set(peer, (names = new Set()));
    names.add(name);
    return "ok";
  }

  unregister(peer: P, name: string): "ok" | "not_yours" {
    const held = this.sessions.get(name);
    if (!held) return "ok";
    if (held.peer !== peer) return "not_yours";
    this.removeName(name);
    return "ok";
  }

  /** The sessions `to` addresses: one name, or every member of "group:<g>". */
  resolve(to: string): Session<P>[] {
    if (to.startsWith(GROUP_PREFIX)) {
      const members = this.groups.get(to.slice(GROUP_PREFIX.length));
      return members ? [...members].map((n) => this.sessions.get(n)!).filter(Boolean) : [];
    }
    const one = this.sessions.get(to);
    return one ? [one] : [];
  }

  list(group: string | undefined, describe: (peer: P) => { pid: number; role: string }): SessionInfo[] {
    const names = group === undefined ? [...this.sessions.keys()] : [...(this.groups.get(group) ?? [])];
    return names
      .sort()
      .map((n) => this.sessions.get(n)!)
      .map((s) => ({ name: s.name, groups: s.groups, since: s.since, ...describe(s.peer), ...(s.role ? { role: s.role } : {}) }));
  }

  addAsk(asker: P, askerId: string, target: Session<P>, timeoutMs: number, onTimeout: (ask: PendingAsk<P>) => void): PendingAsk<P> {
    const routeId = `ask-${++this.nextAsk}`;
    const ask: PendingAsk<P> = {
      routeId,
      asker,
      askerId,
      target: target.peer,
      targetName: target.name,
      timer: setTimeout(() => {
        this.asks.delete(routeId);
        onTimeout(ask);
      }, timeoutMs),
    };
    this.asks.set(routeId, ask);
    return ask;
  }

  /** The ask a reply answers, removed from the table; undefined if unknown (timed out, or never asked). */
  takeAsk(routeId: string): PendingAsk<P> | undefined {
    const ask = this.asks.get(routeId);
    if (!ask) return undefined;
    clearTimeout(ask.timer);
    this.asks.delete(routeId);
    return ask;
  }

  peekAsk(routeId: string): PendingAsk<P> | undefined {
    return this.asks.get(routeId);
  }

  /** A connection went away: its names are freed; returns the asks it made or was asked (removed). */
  dropPeer(peer: P): PendingAsk<P>[] {
    for (const name of this.byPeer.get(peer) ?? []) this.removeName(name);
    this.byPeer.delete(peer);
    const ended: PendingAsk<P>[] = [];
    for (const ask of this.asks.values()) {
      if (ask.asker === peer || ask.target === peer) ended.push(ask);
    }
    for (const ask of ended) {
      clearTimeout(ask.timer);
      this.asks.delete(ask.routeId);
    }
    return ended;
  }

  clear(): void {
    for (const ask of this.asks.values()) clearTimeout(ask.timer);
    this.asks.clear();
  }

  private removeName(name: string): void {
    const s = this.sessions.get(name);
    if (!s) return;
    this.sessions.delete(name);
    for (const g of s.groups) {
      const members = this.groups.get(g);
      members?.delete(name);
      if (members?.size === 0) this.groups.delete(g);
    }
    this.byPeer.get(s.peer)?.delete(name);
  }
}

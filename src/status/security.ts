/**
 * What keeps the status server to its owner.
 *
 * - The token: 32 random bytes (hex) in `$ATOMIC_HOME/status-token`, mode
 *   0600, created by the first server. Whoever holds it may use the server:
 *   through a login URL that sets a session cookie, or as a bearer token
 *   (auth.ts). Other local users cannot read it.
 * - The Host check (DNS rebinding): a page on some other site can make the
 *   browser send requests to 127.0.0.1 under that site's name, so only
 *   requests naming the bound address are answered. A server bound to a
 *   loopback address also answers `localhost`, `127.0.0.1` and `[::1]` with
 *   its port; one bound to every interface
 *   (0.0.0.0, ::) answers IP literals, `localhost` and this machine's host
 *   name, with the port (a rebinding attack needs a DNS name it controls).
 */

import { chmodSync, openSync, readFileSync, statSync, writeSync, closeSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { StorageError } from "../shared/errors.ts";
import { ensurePrivateHome } from "../shared/private-files.ts";

export const TOKEN_FILE = "status-token";

/** The status token in `home`, created (0600) when missing or empty. */
export function loadOrCreateToken(home: string): { token: string; path: string; created: boolean } {
  const path = join(home, TOKEN_FILE);
  try {
    ensurePrivateHome(home);
    const existing = readToken(path);
    if (existing) {
      if ((statSync(path).mode & 0o077) !== 0) chmodSync(path, 0o600);
      return { token: existing, path, created: false };
    }
    const token = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
    // "wx" fails if another server created it meanwhile: then use theirs.
    let fd: number;
    try {
      fd = openSync(path, existing === "" ? "w" : "wx", 0o600);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "EEXIST") {
        const theirs = readToken(path);
        if (theirs) return { token: theirs, path, created: false };
      }
      // A read-only home is still served (reading commands work on it): with a token of this server's own,
      // kept in memory only, reached through the login URL the server prints.
      if (code === "EROFS" || code === "EACCES" || code === "EPERM") return { token, path, created: false };
      throw err;
    }
    try {
      writeSync(fd, `${token}\n`);
    } finally {
      closeSync(fd);
    }
    chmodSync(path, 0o600);
    return { token, path, created: true };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    throw new StorageError("storage_readonly", `cannot read or create the status token ${path} (${code})`, {
      hint: "choose a writable --home or ATOMIC_HOME",
      cause: err,
    });
  }
}

/** The token text, "" for an empty file, undefined when there is no file. */
function readToken(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

function isLoopbackAddress(address: string | undefined): boolean {
  if (!address) return false;
  const a = address.toLowerCase();
  return a === "::1" || a.startsWith("127.") || a.startsWith("::ffff:127.");
}

export function isLoopbackHost(host: string): boolean {
  return host === "localhost" || isLoopbackAddress(host.replace(/^\[|\]$/g, ""));
}

function isWildcard(host: string): boolean {
  return host === "0.0.0.0" || host === "::" || host === "[::]";
}

/** Decides which Host headers a server bound to host:port answers. */
export class HostPolicy {
  private readonly names = new Set<string>();
  private readonly wildcard: boolean;

  constructor(
    readonly host: string,
    readonly port: number,
  ) {
    this.wildcard = isWildcard(host);
    const bare = host.replace(/^\[|\]$/g, "");
    this.names.add(`${bare.includes(":") ? `[${bare}]` : bare}:${port}`.toLowerCase());
    if (isLoopbackHost(bare) || this.wildcard) {
      for (const name of ["localhost", "127.0.0.1", "[::1]"]) this.names.add(`${name}:${port}`);
    }
    if (this.wildcard) this.names.add(`${hostname().toLowerCase()}:${port}`);
  }

  allows(hostHeader: string | undefined): boolean {
    if (!hostHeader) return false;
    const h = hostHeader.trim().toLowerCase();
    if (this.names.has(h)) return true;
    if (!this.wildcard) return false;
    // Every interface: an IP literal with our port is a direct request, not a rebound name.
    const m = /^(\[[0-9a-f:.]+\]|\d{1,3}(?:\.\d{1,3}){3}):(\d+)$/.exec(h);
    return m !== null && Number(m[2]) === this.port;
  }

  /** The URL to print: a wildcard bind is reachable on loopback too. */
  url(path = "/"): string {
    const bare = this.host.replace(/^\[|\]$/g, "");
    const shown = this.wildcard ? "127.0.0.1" : bare.includes(":") ? `[${bare}]` : bare;
    return `http://${shown}:${this.port}${path}`;
  }
}

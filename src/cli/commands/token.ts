/**
 * `atomic token --run ID --read-only [--ttl DURATION]`: a token that may
 * read one run (and its child runs) through the status API and its event
 * streams, and nothing else, until it expires (status/run-tokens.ts). For a
 * web app showing a run's progress: it cannot read another run or post
 * anything. It is signed with the home's status token, so every server of
 * this home accepts it, and a new status token revokes it.
 */

import { defineCommand } from "citty";
import { UsageError } from "../../shared/errors.ts";
import { loadOrCreateToken } from "../../status/security.ts";
import { MAX_RUN_TOKEN_TTL_MS, mintRunToken } from "../../status/run-tokens.ts";
import { err } from "../output.ts";
import { session } from "../session.ts";

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

function parseTtl(text: string): number {
  const m = /^\s*(\d+)\s*([smhd])\s*$/.exec(text);
  const ms = m ? Number(m[1]) * UNITS[m[2]!]! : NaN;
  if (!(ms > 0) || ms > MAX_RUN_TOKEN_TTL_MS) {
    throw new UsageError("bad_flag", `--ttl must be a duration from 1s to 30d like 90s, 15m, 1h or 7d, got ${JSON.stringify(text)}`, { hint: "for example --ttl 1h" });
  }
  return ms;
}

export default defineCommand({
  meta: { name: "token", description: "Mint a read-only token for one run's status API and streams" },
  args: {
    run: { type: "string", description: "the run it may read (with its child runs)", required: true },
    "read-only": { type: "boolean", description: "a token that only reads (the one kind there is; required, so that a script says what it gets)" },
    ttl: { type: "string", description: "how long it is valid, e.g. 15m, 1h, 7d (at most 30d; default 1h)" },
  },
  async run({ args }) {
    const s = session();
    if (args["read-only"] !== true) {
      throw new UsageError("bad_flag", "only read-only tokens can be minted", { hint: `add --read-only: atomic token --run ${args.run} --read-only --ttl 1h` });
    }
    const ttlMs = parseTtl(args.ttl ?? "1h");
    const run = await s.findRun(args.run);
    const { token: secret } = loadOrCreateToken(s.globals.home);
    const { token, expiresAt } = mintRunToken(secret, run.rootId, ttlMs);
    if (s.globals.json) return s.json({ token, runId: run.rootId, readOnly: true, expiresAt: new Date(expiresAt).toISOString() });
    s.result(token);
    // On stderr: stdout is the token alone (TOKEN=$(atomic token …)).
    if (!s.globals.quiet) err(`${s.style.dim(`reads run ${run.rootId} (and its child runs) until ${new Date(expiresAt).toISOString()}; send it as Authorization: Bearer <token>`)}\n`);
  },
});

/**
 * A Postgres client for the fleet harness tests, run inside a host: connects
 * to argv[2], prints "connected", then for each line N on stdin runs
 * `select N` and prints "answer N" (or "error MESSAGE"). No timeouts of its
 * own: a cut network shows as silence, which is what the tests look for.
 */

import pg from "pg";

const client = new pg.Client({ connectionString: process.argv[2] });
client.on("error", (err) => console.log(`error ${err.message}`));
try {
  await client.connect();
  console.log("connected");
} catch (err) {
  console.log(`error ${(err as Error).message}`);
  process.exit(1);
}
let buf = "";
for await (const chunk of process.stdin) {
  buf += chunk.toString();
  let nl: number;
  while ((nl = buf.indexOf("\n")) >= 0) {
    const n = Number(buf.slice(0, nl));
    buf = buf.slice(nl + 1);
    client.query("select $1::int as n", [n]).then(
      (r) => console.log(`answer ${r.rows[0].n}`),
      (err: Error) => console.log(`error ${err.message}`),
    );
  }
}
await client.end().catch(() => {});

/**
 * shared/secrets.ts and runners/stage-env.ts: which values are redacted and
 * how; which variables a stage's environment keeps. The role logs are
 * checked in a real process (its stderr redirected to a file, as the
 * coordinator does for its workers).
 */

import { afterEach, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BUN, ROOT } from "../helpers/atomic.ts";
import { makeTempDir, removeTempDirs } from "../helpers/temp.ts";
import { REDACTED, addSecret, addSecretsOfUrl, holdsSecret, redact, redactValue, lineRedactor } from "../../src/shared/secrets.ts";
import { stageEnv } from "../../src/runners/stage-env.ts";

afterEach(removeTempDirs);

test("registered values, their percent-encoded form and a URL's password are redacted; short ones are not", () => {
  addSecret("s3cr3t/value+1");
  addSecret("short");
  addSecretsOfUrl("postgres://atomic:p%40ss-word-42@db.example/atomic");
  expect(redact("a s3cr3t/value+1 b")).toBe(`a ${REDACTED} b`);
  expect(redact("url ?k=s3cr3t%2Fvalue%2B1")).toBe(`url ?k=${REDACTED}`);
  expect(redact("short stays")).toBe("short stays");
  expect(redact("postgres://atomic:p%40ss-word-42@db failed; pw p@ss-word-42")).toBe(`postgres://atomic:${REDACTED}@db failed; pw ${REDACTED}`);
});

test("redactValue copies only what holds a secret", () => {
  addSecret("another-secret-9");
  const clean = { a: "x", list: ["y", { b: 1 }] };
  expect(redactValue(clean)).toBe(clean);
  const dirty = { a: "x", nested: { list: ["ok", "has another-secret-9 in it"] }, other: { n: 1 } };
  const out = redactValue(dirty);
  expect(out).toEqual({ a: "x", nested: { list: ["ok", `has ${REDACTED} in it`] }, other: { n: 1 } });
  expect(out.other).toBe(dirty.other);
  expect(dirty.nested.list[1]).toBe("has another-secret-9 in it");
});

test("a stage's environment: credentials withheld unless named, `true` passes atomic's own value, identity last", () => {
  const saved = { ...process.env };
  try {
    Object.assign(process.env, { OPENAI_API_KEY: "sk-1", ANTHROPIC_API_KEY: "sk-2", ATOMIC_JOURNAL: "postgres://u:p@h/d", ATOMIC_POOL_CONFIG: "{}", PLAIN: "kept" });
    const id = { runId: "r1", stageName: "s", stageKey: "0", attempt: 2 };
    const plain = stageEnv(id);
    expect(plain.PLAIN).toBe("kept");
    for (const k of ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ATOMIC_JOURNAL", "ATOMIC_POOL_CONFIG"]) expect(plain[k]).toBeUndefined();
    expect(plain).toMatchObject({ ATOMIC_RUN_ID: "r1", ATOMIC_STAGE: "s", ATOMIC_STAGE_KEY: "0", ATOMIC_ATTEMPT: "2" });
    const named = stageEnv({ ...id, env: { OPENAI_API_KEY: true, ATOMIC_JOURNAL: "given", MISSING: true, ATOMIC_RUN_ID: "spoofed" } });
    expect(named.OPENAI_API_KEY).toBe("sk-1");
    expect(named.ATOMIC_JOURNAL).toBe("given");
    expect("MISSING" in named).toBe(false);
    expect(named.ATOMIC_RUN_ID).toBe("r1");
    expect(stageEnv(id, ["ANTHROPIC_API_KEY"]).ANTHROPIC_API_KEY).toBe("sk-2");
  } finally {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  }
});

test("role log lines (writeStderr) never carry a credential of the process's environment", async () => {
  const dir = makeTempDir("atomic-secrets-log-");
  const log = join(dir, "worker.log");
  const key = "sk-live-0123456789abcdef";
  const script = `import { writeStderr } from ${JSON.stringify(join(ROOT, "src", "shared", "raw-stderr.ts"))};\nwriteStderr("request failed with key " + process.env.OPENAI_API_KEY + "\\n");\n`;
  const proc = Bun.spawn([BUN, "-e", script], { env: { ...process.env, OPENAI_API_KEY: key }, stdout: "ignore", stderr: Bun.file(log) });
  expect(await proc.exited).toBe(0);
  expect(readFileSync(log, "utf8")).toBe(`request failed with key ${REDACTED}\n`);
});

test("a journal URL in the environment: only its password is redacted, so its address reads the same in every mention", async () => {
  const script = `import { redact } from ${JSON.stringify(join(ROOT, "src", "shared", "secrets.ts"))};
import { parsePostgresUrl } from ${JSON.stringify(join(ROOT, "src", "journal", "postgres", "url.ts"))};
const t = parsePostgresUrl(process.env.ATOMIC_JOURNAL);
console.log(redact(process.env.ATOMIC_JOURNAL + " | lost the connection to the journal's Postgres at " + t.location + " (connect ECONNREFUSED 127.0.0.1:5999)"));`;
  const said = async (url: string) => {
    const proc = Bun.spawn([BUN, "-e", script], { env: { ...process.env, ATOMIC_JOURNAL: url }, stdout: "pipe", stderr: "inherit" });
    const out = await new Response(proc.stdout).text();
    expect(await proc.exited).toBe(0);
    return out.trim();
  };
  expect(await said("postgres://me@127.0.0.1:5999/app")).toBe(
    "postgres://me@127.0.0.1:5999/app | lost the connection to the journal's Postgres at postgres://me@127.0.0.1:5999/app (connect ECONNREFUSED 127.0.0.1:5999)",
  );
  expect(await said("postgres://me:hunter2-long-secret@127.0.0.1:5999/app")).toBe(
    `postgres://me:${REDACTED}@127.0.0.1:5999/app | lost the connection to the journal's Postgres at postgres://me@127.0.0.1:5999/app (connect ECONNREFUSED 127.0.0.1:5999)`,
  );
});

test("credentials are also redacted by their look: sk- keys, GitHub and AWS ids, bearer tokens, api_key= values, private-key blocks; short examples stay", () => {
  const pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----";
  const cases: [string, string][] = [
    ["key sk-proj-abcdefghijklmnopqrstuvwxyz012345 end", `key ${REDACTED} end`],
    ["sk-ant-api03-abcdefghijklmnopqrstuvwxyz", REDACTED],
    ["ghp_abcdefghijklmnopqrstuvwxyz0123456789 and AKIAABCDEFGHIJKLMNOP", `${REDACTED} and ${REDACTED}`],
    ["Authorization: Bearer abcdefghijklmnopqrstuvwxyz.0123", `Authorization: Bearer ${REDACTED}`],
    ["curl -d api_key=abcd1234efgh5678 https://x", `curl -d api_key=${REDACTED} https://x`],
    ['{"password": "hunter2hunter2", "user": "me"}', `{"password": "${REDACTED}", "user": "me"}`],
    [`found:\n${pem}\nafter`, `found:\n${REDACTED}\nafter`],
    ["sk-test and Bearer short and api_key=x and inputTokens: 12345678", "sk-test and Bearer short and api_key=x and inputTokens: 12345678"],
  ];
  for (const [text, want] of cases) expect(redact(text)).toBe(want);
  expect(holdsSecret("nothing here")).toBe(false);
  expect(holdsSecret(pem)).toBe(true);
  expect(redactValue({ out: [pem], n: 1 })).toEqual({ out: [REDACTED], n: 1 });
});

test("a text read line by line (atomic logs): a private-key block's lines after its BEGIN are left out up to its END; what follows END stays", () => {
  const r = lineRedactor();
  const lines = ["before", "-----BEGIN OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAA", "more body", "-----END OPENSSH PRIVATE KEY----- tail", "-----BEGIN RSA PRIVATE KEY-----", "body", "-----END RSA PRIVATE KEY-----", "after sk-proj-abcdefghijklmnopqrstuvwxyz012345"];
  expect(lines.map(r)).toEqual(["before", REDACTED, undefined, undefined, " tail", REDACTED, undefined, undefined, `after ${REDACTED}`]);
});

/**
 * The intercom protocol, version 1: every frame between a client and the
 * broker. Protocol-only: types, valibot schemas, limits; no behaviour.
 *
 * Frames are JSON objects carrying `v` (the protocol version) and `type`.
 * Requests (client → broker) carry an `id` the reply repeats:
 *
 *   hello       first frame of a connection: who connects (pid, role)
 *   register    claim a session name, with groups (each root run is one)
 *   unregister  give a name up
 *   send        route `body` to a session (`to`: a name) or to every
 *               session of a group (`to`: "group:<name>"); the reply is
 *               the delivery receipt: the sessions it was handed to
 *   ask         route `body` to one session and wait (at most
 *               `timeoutMs`) for its `reply`; the reply frame carries it
 *   reply       answer a received ask (`inReplyTo`: the ask's id)
 *   list        sessions, optionally of one group; with `waitFor` (names)
 *               and `waitMs`, answered once every one of those names is
 *               registered, or when `waitMs` has passed (`atomic sessions`
 *               waits so for the runs the journal says are driven)
 *   status      the broker's pid, version, uptime, counters
 *
 * Replies (broker → client): `ok` { id, result } or `error` { id, error:
 * { name, message, code } }. Unsolicited (broker → client): `message`,
 * a routed send or ask (`ask: true` expects a reply).
 *
 * A frame that is not valid JSON, not an object of a known type, over
 * MAX_FRAME_BYTES, or of another version gets an `error` reply (id null
 * when none could be read) and the connection is closed.
 */

import * as v from "valibot";

export const PROTOCOL_VERSION = 1;
/** Largest frame body, in bytes. */
export const MAX_FRAME_BYTES = 1024 * 1024;
export const MAX_ASK_TIMEOUT_MS = 10 * 60_000;
export const GROUP_PREFIX = "group:";

export const MODES = ["steer", "followUp", "interrupt"] as const;
export type Mode = (typeof MODES)[number];

// Names and ids: printable, bounded (a session name may be a stage address `<run>:<path>`).
const Name = v.pipe(v.string(), v.minLength(1), v.maxLength(1100), v.regex(/^[^\u0000-\u001f\u007f]+$/));
const Id = v.pipe(v.string(), v.minLength(1), v.maxLength(200));
const Version = v.literal(PROTOCOL_VERSION);

// ---------------------------------------------------------------- client → broker

export const HelloSchema = v.object({ v: Version, type: v.literal("hello"), id: Id, pid: v.number(), role: v.pipe(v.string(), v.maxLength(100)) });
/** `role`: what the session is, when not its connection's role (a root run's stage sessions: "stage"). */
export const RegisterSchema = v.object({
  v: Version,
  type: v.literal("register"),
  id: Id,
  name: Name,
  groups: v.pipe(v.array(Name), v.maxLength(32)),
  role: v.optional(v.pipe(v.string(), v.maxLength(100))),
});
export const UnregisterSchema = v.object({ v: Version, type: v.literal("unregister"), id: Id, name: Name });
export const SendSchema = v.object({
  v: Version,
  type: v.literal("send"),
  id: Id,
  from: v.optional(Name),
  to: Name,
  body: v.unknown(),
  mode: v.optional(v.picklist(MODES)),
});
export const AskSchema = v.object({
  v: Version,
  type: v.literal("ask"),
  id: Id,
  from: v.optional(Name),
  to: Name,
  body: v.unknown(),
  timeoutMs: v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(MAX_ASK_TIMEOUT_MS)),
});
export const ReplySchema = v.object({ v: Version, type: v.literal("reply"), id: Id, inReplyTo: Id, body: v.unknown() });
export const ListSchema = v.object({
  v: Version,
  type: v.literal("list"),
  id: Id,
  group: v.optional(Name),
  waitFor: v.optional(v.pipe(v.array(Name), v.maxLength(1000))),
  waitMs: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(MAX_ASK_TIMEOUT_MS))),
});
export const StatusSchema = v.object({ v: Version, type: v.literal("status"), id: Id });

// The hot frames first: valibot's variant tries the options in order.
export const ClientFrameSchema = v.variant("type", [
  SendSchema,
  AskSchema,
  ReplySchema,
  HelloSchema,
  RegisterSchema,
  UnregisterSchema,
  ListSchema,
  StatusSchema,
]);
export type ClientFrame = v.InferOutput<typeof ClientFrameSchema>;

/**
 * The same schemas by `type`: receivers look the type up first and check
 * the frame against that one schema (what the variant does, without trying
 * the other options first: frames are the broker's hot path).
 */
export const CLIENT_FRAME_SCHEMAS: Readonly<Record<string, (typeof ClientFrameSchema)["options"][number]>> = Object.fromEntries(
  ClientFrameSchema.options.map((o) => [o.entries.type.literal, o]),
);
export type ClientFrameType = ClientFrame["type"];

// ---------------------------------------------------------------- broker → client

export interface ErrorBody {
  name: string;
  message: string;
  code: string;
}

export const ErrorBodySchema = v.object({ name: v.string(), message: v.string(), code: v.string() });
export const OkSchema = v.object({ v: Version, type: v.literal("ok"), id: Id, result: v.unknown() });
export const ErrorSchema = v.object({ v: Version, type: v.literal("error"), id: v.nullable(Id), error: ErrorBodySchema });
export const MessageSchema = v.object({
  v: Version,
  type: v.literal("message"),
  id: Id,
  from: v.nullable(Name),
  to: Name,
  body: v.unknown(),
  mode: v.optional(v.picklist(MODES)),
  ask: v.boolean(),
});

export const BrokerFrameSchema = v.variant("type", [OkSchema, MessageSchema, ErrorSchema]);
export type BrokerFrame = v.InferOutput<typeof BrokerFrameSchema>;
export const BROKER_FRAME_SCHEMAS: Readonly<Record<string, (typeof BrokerFrameSchema)["options"][number]>> = Object.fromEntries(
  BrokerFrameSchema.options.map((o) => [o.entries.type.literal, o]),
);
export type IncomingMessage = v.InferOutput<typeof MessageSchema>;

// ---------------------------------------------------------------- results of requests

export interface SessionInfo {
  name: string;
  groups: string[];
  pid: number;
  role: string;
  since: number;
}

export interface BrokerInfo {
  pid: number;
  version: string;
  protocol: number;
  startedAt: number;
  uptimeMs: number;
  connections: number;
  sessions: number;
  counters: { frames: number; badFrames: number; sent: number; asks: number };
}

export interface Results {
  hello: { broker: { pid: number; version: string; protocol: number } };
  register: { name: string };
  unregister: { name: string };
  /** The sessions the body was handed to (written to their connections). */
  send: { delivered: string[] };
  ask: { from: string; reply: unknown };
  reply: { delivered: boolean };
  list: { sessions: SessionInfo[] };
  status: BrokerInfo;
}

/** Stable error codes of `error` replies. */
export const ERROR_CODES = {
  badFrame: "bad_frame",
  /** A frame over MAX_FRAME_BYTES (on the wire: the connection closes; to forward: the sender is told). */
  frameTooLarge: "frame_too_large",
  unsupportedVersion: "unsupported_version",
  notHello: "hello_required",
  nameTaken: "name_taken",
  noSession: "no_session",
  timeout: "timeout",
  sessionGone: "session_gone",
  unknownAsk: "unknown_ask",
  notYours: "not_your_session",
} as const;

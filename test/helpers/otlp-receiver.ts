/**
 * A local OTLP/HTTP trace receiver for tests: real HTTP on 127.0.0.1
 * (Bun.serve on a free port) taking `POST /v1/traces` in both encodings,
 * protobuf (read with the OpenTelemetry JS transformer's own protobuf
 * reader, walking the trace service's message numbers) and JSON (the OTLP
 * JSON mapping). Every span arrives as a `ReceivedSpan` (ids in hex,
 * attributes as plain values) in `spans`, an `Arrivals` to wait on.
 * With `requireHeader`, a request without that header and value is
 * refused (401) and counted in `refused`, as a hosted receiver refuses
 * one without its API key.
 */

import { join } from "node:path";
import { Arrivals } from "./arrivals.ts";
import { ROOT } from "./atomic.ts";

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  attributes: Record<string, unknown>;
  statusCode: number;
  statusMessage: string;
  events: string[];
  /** The resource's attributes (service.name ...). */
  resource: Record<string, unknown>;
  encoding: "protobuf" | "json";
}

export interface OtlpReceiver {
  url: string;
  spans: Arrivals<ReceivedSpan>;
  requests: number;
  /** Requests refused for want of the required header. */
  refused: number;
  close(): Promise<void>;
}

export interface Reader {
  pos: number;
  /** The message's bytes (the reader's own field: it has no method for doubles). */
  _buf: Uint8Array;
  isAtEnd(): boolean;
  readTag(): { fieldNumber: number; wireType: number };
  readVarint(): number;
  readBytes(): Uint8Array;
  readString(): string;
  skip(wireType: number): void;
}
type ReaderClass = new (buf: Uint8Array) => Reader;

/** The transformer's reader: not among the package's exports, so it is loaded by its file. */
const { ProtobufReader } = (await import(join(ROOT, "node_modules/@opentelemetry/otlp-transformer/dist/common/protobuf/protobuf-reader.mjs"))) as { ProtobufReader: ReaderClass };

/** A header a receiver requires on every request (an API key). */
export interface RequiredHeader {
  name: string;
  value: string;
}

/** A local OTLP/HTTP endpoint: `POST <path>` in either encoding, each request decoded by `decode` into `into`. */
export function serveOtlp<T>(
  path: string,
  into: Arrivals<T>,
  decode: { json: (body: JsonAny) => T[]; protobuf: (body: Uint8Array) => T[] },
  hostname = "127.0.0.1",
  requireHeader?: RequiredHeader,
): { url: string; readonly requests: number; readonly refused: number; close(): Promise<void> } {
  const state = { requests: 0, refused: 0 };
  const server = Bun.serve({
    hostname,
    port: 0,
    async fetch(req) {
      if (req.method !== "POST" || new URL(req.url).pathname !== path) return new Response("not found", { status: 404 });
      if (requireHeader && req.headers.get(requireHeader.name) !== requireHeader.value) {
        state.refused++;
        return new Response("missing or wrong API key", { status: 401 });
      }
      state.requests++;
      const body = new Uint8Array(await req.arrayBuffer());
      const json = (req.headers.get("content-type") ?? "").includes("json");
      for (const item of json ? decode.json(JSON.parse(new TextDecoder().decode(body))) : decode.protobuf(body)) into.add(item);
      return json ? Response.json({}) : new Response(new Uint8Array(), { headers: { "content-type": "application/x-protobuf" } });
    },
  });
  return {
    url: `http://${hostname}:${server.port}`,
    get requests() {
      return state.requests;
    },
    get refused() {
      return state.refused;
    },
    close: async () => {
      await server.stop(true);
    },
  };
}

/** A trace receiver on `hostname` (where other machines of a test fleet reach it: test/helpers/fleet.ts), refusing requests without `requireHeader`. */
export async function startOtlpReceiver(hostname = "127.0.0.1", requireHeader?: RequiredHeader): Promise<OtlpReceiver> {
  const spans = new Arrivals<ReceivedSpan>();
  const endpoint = serveOtlp("/v1/traces", spans, { json: fromJson, protobuf: fromProtobuf }, hostname, requireHeader);
  return {
    url: endpoint.url,
    spans,
    get requests() {
      return endpoint.requests;
    },
    get refused() {
      return endpoint.refused;
    },
    close: () => endpoint.close(),
  };
}

// ---------------------------------------------------------------- protobuf (opentelemetry/proto/trace/v1)

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString("hex");
}

/** Fields of a message: each field number's values (sub-messages as readers). */
export function fields(buf: Uint8Array, onField: (n: number, wireType: number, r: Reader) => void): void {
  const r = new ProtobufReader(buf);
  while (!r.isAtEnd()) {
    const { fieldNumber, wireType } = r.readTag();
    const before = r.pos;
    onField(fieldNumber, wireType, r);
    if (r.pos === before) r.skip(wireType);
  }
}

function anyValue(buf: Uint8Array): unknown {
  let value: unknown;
  fields(buf, (n, _w, r) => {
    if (n === 1) value = r.readString();
    else if (n === 2) value = r.readVarint() !== 0;
    else if (n === 3) value = r.readVarint();
    else if (n === 4) {
      // double_value: fixed64, little-endian
      value = new DataView(r._buf.buffer, r._buf.byteOffset + r.pos, 8).getFloat64(0, true);
      r.pos += 8;
    } else if (n === 5) {
      const values: unknown[] = [];
      fields(r.readBytes(), (m, _w2, r2) => {
        if (m === 1) values.push(anyValue(r2.readBytes()));
      });
      value = values;
    }
  });
  return value;
}

export function keyValue(buf: Uint8Array, into: Record<string, unknown>): void {
  let key = "";
  let value: unknown;
  fields(buf, (n, _w, r) => {
    if (n === 1) key = r.readString();
    else if (n === 2) value = anyValue(r.readBytes());
  });
  into[key] = value;
}

function fromProtobuf(body: Uint8Array): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  fields(body, (n, _w, r) => {
    if (n !== 1) return;
    const resource: Record<string, unknown> = {};
    const scopeSpans: Uint8Array[] = [];
    fields(r.readBytes(), (m, _w2, r2) => {
      if (m === 1) fields(r2.readBytes(), (k, _w3, r3) => k === 1 && keyValue(r3.readBytes(), resource));
      else if (m === 2) scopeSpans.push(r2.readBytes());
    });
    for (const ss of scopeSpans) {
      fields(ss, (m, _w2, r2) => {
        if (m !== 2) return;
        const span: ReceivedSpan = { traceId: "", spanId: "", parentSpanId: "", name: "", attributes: {}, statusCode: 0, statusMessage: "", events: [], resource, encoding: "protobuf" };
        fields(r2.readBytes(), (f, _w3, r3) => {
          if (f === 1) span.traceId = hex(r3.readBytes());
          else if (f === 2) span.spanId = hex(r3.readBytes());
          else if (f === 4) span.parentSpanId = hex(r3.readBytes());
          else if (f === 5) span.name = r3.readString();
          else if (f === 9) keyValue(r3.readBytes(), span.attributes);
          else if (f === 11) fields(r3.readBytes(), (g, _w4, r4) => g === 2 && span.events.push(r4.readString()));
          else if (f === 15) {
            fields(r3.readBytes(), (g, _w4, r4) => {
              if (g === 2) span.statusMessage = r4.readString();
              else if (g === 3) span.statusCode = r4.readVarint();
            });
          }
        });
        out.push(span);
      });
    }
  });
  return out;
}

// ---------------------------------------------------------------- JSON

export interface JsonAny {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: JsonAny[] };
}

function jsonValue(v: JsonAny): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(jsonValue);
  return undefined;
}

export function jsonAttributes(list: { key: string; value: JsonAny }[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, jsonValue(kv.value)]));
}

function fromJson(body: any): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of body.resourceSpans ?? []) {
    const resource = jsonAttributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId ?? "",
          name: s.name,
          attributes: jsonAttributes(s.attributes),
          statusCode: s.status?.code ?? 0,
          statusMessage: s.status?.message ?? "",
          events: (s.events ?? []).map((e: { name: string }) => e.name),
          resource,
          encoding: "json",
        });
      }
    }
  }
  return out;
}

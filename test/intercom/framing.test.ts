/**
 * Frames on an intercom socket (src/intercom/framing.ts): a 4-byte length
 * and UTF-8 JSON. Whole frames come out whatever the chunking; a bad length,
 * bad UTF-8 or bad JSON is reported once and ends decoding.
 */

import { describe, expect, test } from "bun:test";
import { FrameDecoder, FrameWriter, encodeFrame } from "../../src/intercom/framing.ts";
import { MAX_FRAME_BYTES } from "../../src/intercom/protocol/index.ts";

function header(n: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n);
  return b;
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

describe("frames", () => {
  test("whole frames come out in order whatever the chunking (byte by byte, several per chunk)", () => {
    const values = [{ a: 1 }, "text with ünïcödé ✓", [1, 2, 3], { nested: { deep: true } }, 42];
    const stream = concat(...values.map((v) => encodeFrame(v)));
    for (const size of [1, 2, 3, 5, 7, 64, stream.length]) {
      const d = new FrameDecoder();
      const out: unknown[] = [];
      for (let i = 0; i < stream.length; i += size) {
        // A fresh copy per chunk, reused by the "socket" afterwards: the decoder must have copied what it keeps.
        const chunk = stream.slice(i, i + size);
        for (const f of d.push(chunk)) {
          expect(f.ok).toBe(true);
          if (f.ok) out.push(f.value);
        }
        chunk.fill(0);
      }
      expect(out).toEqual(values);
      expect(d.pending).toBe(0);
    }
  });

  test("a half frame waits for the rest", () => {
    const frame = encodeFrame({ hello: "world" });
    const d = new FrameDecoder();
    expect(d.push(frame.slice(0, 6))).toEqual([]);
    expect(d.pending).toBe(6);
    expect(d.push(frame.slice(6))).toEqual([{ ok: true, value: { hello: "world" } }]);
  });

  test("a length over the limit is refused at once, without waiting for the body, and decoding stops", () => {
    const d = new FrameDecoder();
    const out = d.push(header(MAX_FRAME_BYTES + 1));
    expect(out).toEqual([{ ok: false, code: "frame_too_large", message: expect.stringContaining("over the limit") }]);
    expect(d.push(encodeFrame({ later: true }))).toEqual([]);
    const huge = new FrameDecoder().push(header(0xffffffff));
    expect(huge[0]).toMatchObject({ ok: false, code: "frame_too_large" });
  });

  test("a zero length, bytes that are not UTF-8, and text that is not JSON are bad frames", () => {
    expect(new FrameDecoder().push(header(0))[0]).toMatchObject({ ok: false, code: "bad_frame" });
    expect(new FrameDecoder().push(concat(header(2), new Uint8Array([0xff, 0xfe])))[0]).toMatchObject({ ok: false, code: "bad_frame" });
    const notJson = new TextEncoder().encode("{nope");
    expect(new FrameDecoder().push(concat(header(notJson.length), notJson))[0]).toMatchObject({ ok: false, code: "bad_frame" });
    // Frames before the bad one still come out.
    const mixed = new FrameDecoder().push(concat(encodeFrame(1), header(0), encodeFrame(2)));
    expect(mixed).toEqual([{ ok: true, value: 1 }, { ok: false, code: "bad_frame", message: expect.any(String) }]);
  });

  test("encoding refuses a value over the limit", () => {
    expect(() => encodeFrame("x".repeat(100), 50)).toThrow(RangeError);
  });

  test("the writer keeps what a partial write left and sends it on drain, in order", () => {
    const sent: number[] = [];
    let room = 3;
    let ended = false;
    const socket = {
      write(data: Uint8Array) {
        const n = Math.min(room, data.length);
        sent.push(...data.subarray(0, n));
        room -= n;
        return n;
      },
      end() {
        ended = true;
      },
    };
    const w = new FrameWriter(socket);
    const a = encodeFrame("first");
    const b = encodeFrame("second");
    w.write(a);
    w.write(b);
    w.end();
    expect(ended).toBe(false);
    expect(w.backlog).toBe(a.length + b.length - 3);
    room = Infinity;
    w.drain();
    expect([...new Uint8Array(sent)]).toEqual([...concat(a, b)]);
    expect(ended).toBe(true);
  });
});

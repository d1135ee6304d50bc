/** Reading back a PNG that a builtin's test expects from a real Chromium: its signature, size and first pixel. */

import { expect } from "bun:test";
import { inflateSync } from "node:zlib";

/** A PNG's width, height and first pixel (any filter type leaves the first pixel of the first row as it is). */
export function png(bytes: Buffer): { width: number; height: number; first: number[] } {
  expect([...bytes.subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  let at = 8;
  const idat: Buffer[] = [];
  let width = 0;
  let height = 0;
  while (at < bytes.length) {
    const length = bytes.readUInt32BE(at);
    const type = bytes.toString("latin1", at + 4, at + 8);
    const data = bytes.subarray(at + 8, at + 8 + length);
    if (type === "IHDR") [width, height] = [data.readUInt32BE(0), data.readUInt32BE(4)];
    if (type === "IDAT") idat.push(data);
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  return { width, height, first: [raw[1]!, raw[2]!, raw[3]!] };
}

/** The PNG file at `path`, read as above. */
export async function pngFile(path: string): Promise<{ width: number; height: number; first: number[] }> {
  return png(Buffer.from(await Bun.file(path).arrayBuffer()));
}

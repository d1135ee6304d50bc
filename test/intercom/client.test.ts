/**
 * The intercom client against a scripted broker: a real unix socket whose
 * server writes the frames a test chooses, in the same write when it must.
 * It covers orderings a real broker produces only under load, such as an
 * ask that arrives in the same read as the reply to the client's last
 * register (the client was not yet "open" then, and its reply used to be
 * dropped, so the asker waited out its whole timeout).
 */

import { afterEach, expect, test } from "bun:test";
import type { Socket } from "bun";
import { IntercomClient } from "../../src/intercom/client.ts";
import { FrameDecoder, encodeFrame } from "../../src/intercom/framing.ts";
import { ensurePrivateDirs, intercomPaths } from "../../src/intercom/paths.ts";
import { PROTOCOL_VERSION } from "../../src/intercom/protocol/index.ts";
import { waitUntil } from "../helpers/atomic.ts";
import { cleanupHomes, newHome } from "./support.ts";

afterEach(cleanupHomes);

type Frame = { type: string; id: string; [k: string]: unknown };

test("an ask that arrives in the same read as the last register's reply is answered on that connection", async () => {
  const home = newHome();
  const paths = intercomPaths(home);
  ensurePrivateDirs(paths);
  const received: Frame[] = [];
  const server = Bun.listen<{ decoder: FrameDecoder }>({
    unix: paths.socket,
    socket: {
      open(s) {
        s.data = { decoder: new FrameDecoder() };
      },
      data(s: Socket<{ decoder: FrameDecoder }>, chunk) {
        for (const d of s.data.decoder.push(chunk)) {
          if (!d.ok) throw new Error(d.message);
          const f = d.value as Frame;
          received.push(f);
          const ok = (result: unknown) => encodeFrame({ v: PROTOCOL_VERSION, type: "ok", id: f.id, result });
          if (f.type === "hello") s.write(ok({ broker: { pid: process.pid, version: "scripted", protocol: PROTOCOL_VERSION } }));
          else if (f.type === "register") {
            const ask = encodeFrame({ v: PROTOCOL_VERSION, type: "message", id: "m1", from: "asker", to: f.name, body: "ping", ask: true });
            s.write(Buffer.concat([ok({ name: f.name }), ask]));
          } else if (f.type === "reply") s.write(ok({ delivered: true }));
        }
      },
    },
  });
  const client = new IntercomClient({
    home,
    role: "root",
    spawn: false,
    onMessage: (msg, reply) => void reply({ pong: msg.body }),
  });
  try {
    await client.register("run1");
    client.start();
    await client.whenOpen();
    await waitUntil(() => received.some((f) => f.type === "reply"), 10_000, "the client's reply");
    expect(received.find((f) => f.type === "reply")).toMatchObject({ inReplyTo: "m1", body: { pong: "ping" } });
  } finally {
    client.close();
    server.stop(true);
  }
});

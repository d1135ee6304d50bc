/**
 * A loopback host's way to Postgres in loopback mode: a TCP relay in the
 * test process, one per host, from 127.0.0.1:<its port> to the cluster.
 *
 * Cut (`partition`): the relay stops reading from both sides of every open
 * connection, so nothing more crosses and each side's kernel buffers fill
 * (its writes stall, as under TCP flow control across a dead link); a new
 * connection is accepted by the kernel but left unread and unconnected, so
 * the client waits for a server greeting that does not come. Mend (`heal`):
 * reading resumes, the waiting connections are relayed, as across a cut
 * that heals before either side gives up. Unlike a real cut the client's
 * connect() itself succeeds (the relay's kernel completes the handshake);
 * an application sees the same silence.
 *
 * It runs on this process's event loop: a test that blocks it (spawnSync)
 * stalls every relay meanwhile.
 */

import net from "node:net";

export interface Relay {
  port: number;
  cut(): void;
  mend(): void;
  close(): void;
}

export async function startRelay(target: { host: string; port: number }): Promise<Relay> {
  let open = true;
  const pending: net.Socket[] = [];
  const sockets = new Set<net.Socket>();

  const relay = (client: net.Socket) => {
    sockets.add(client);
    const upstream = net.connect(target.port, target.host);
    sockets.add(upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("data", (d) => upstream.write(d));
    upstream.on("data", (d) => client.write(d));
    for (const s of [client, upstream]) {
      s.on("close", end);
      s.on("error", end);
    }
  };

  const server = net.createServer({ pauseOnConnect: true }, (client) => {
    client.on("error", () => client.destroy());
    if (!open) {
      pending.push(client);
      return;
    }
    relay(client);
    client.resume();
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    cut() {
      open = false;
      for (const s of sockets) s.pause();
    },
    mend() {
      open = true;
      for (const s of sockets) s.resume();
      for (const client of pending.splice(0)) {
        if (client.destroyed) continue;
        relay(client);
        client.resume();
      }
    },
    close() {
      server.close();
      for (const s of sockets) s.destroy();
      for (const s of pending) s.destroy();
      sockets.clear();
    },
  };
}

/**
 * sslmode=prefer on one connection, as libpq does it: the client asks for
 * TLS (SSLRequest), and on the server's "N" sends its startup message on
 * the same socket in the clear; on "S" it upgrades that socket to TLS.
 *
 * Why not pg's own `ssl`: on "N" pg closes the socket and fails the
 * connection, so "try TLS, else connect without" costs two connections,
 * and Postgres forks a backend for each before it reads the first byte.
 * Measured here: the refused attempt took 3 to 5 ms of every process's
 * first connection (a resume's whole way to its first new step is about
 * 60 ms).
 *
 * How: a pg Client whose `connect` first makes the socket and asks the
 * question itself, then hands pg that socket (its `connect` then only says
 * it is connected) with pg's TLS either off ("N") or on in pg's "direct"
 * mode ("S"), in which pg starts the TLS handshake on the socket as it is,
 * without asking again. These are pg's Client and Connection fields as of
 * pg 8.23 (the version is pinned); test/conformance/postgres.test.ts
 * checks both answers against real servers.
 */

import { connect as netConnect, type Socket } from "node:net";
import type { ConnectionOptions } from "node:tls";
import pg from "pg";

/** The SSLRequest message: length 8, request code 80877103. */
const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 4, 210, 22, 47]);
const YES = 0x53; // "S"
const NO = 0x4e; // "N"

/** The fields of pg's Client and its Connection that the negotiation sets. */
interface PgClientFields {
  host: string;
  port: number;
  ssl: ConnectionOptions | false;
  sslNegotiation: string;
  connection: { stream: Socket; ssl: ConnectionOptions | false; sslNegotiation: string };
}

/** A connected socket whose SSLRequest the server answered: `tls` whether it said yes. */
function ask(host: string, port: number, timeoutMs: number): Promise<{ socket: Socket; tls: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host, port });
    socket.setNoDelay(true);
    const fail = (err: Error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    // pg's own wording for each failure, so that open-errors.ts reads them as it reads pg's.
    const timer = timeoutMs > 0 ? setTimeout(() => fail(new Error("timeout expired")), timeoutMs) : undefined;
    socket.once("error", fail);
    socket.once("connect", () => socket.write(SSL_REQUEST));
    socket.once("data", (answer: Buffer) => {
      if (answer.length !== 1 || (answer[0] !== YES && answer[0] !== NO)) return fail(new Error("There was an error establishing an SSL connection"));
      clearTimeout(timer);
      socket.off("error", fail);
      resolve({ socket, tls: answer[0] === YES });
    });
  });
}

/** A pg Client class for a pool (its `Client` option) that connects with sslmode=prefer in one connection. */
export function preferTlsClient(tls: ConnectionOptions, timeoutMs: number): typeof pg.Client {
  class PreferTlsClient extends pg.Client {
    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error) => void): void;
    override connect(callback?: (err: Error) => void): Promise<pg.Client> | void {
      const self = this as unknown as PgClientFields;
      const ready = ask(self.host, self.port, timeoutMs).then(({ socket, tls: yes }) => {
        // pg calls connect(port, host) on its stream and waits for "connect": this one is connected already.
        socket.connect = (() => {
          process.nextTick(() => socket.emit("connect"));
          return socket;
        }) as Socket["connect"];
        self.connection.stream = socket;
        self.ssl = self.connection.ssl = yes ? tls : false;
        if (yes) self.sslNegotiation = self.connection.sslNegotiation = "direct";
      });
      if (!callback) return ready.then(() => super.connect());
      ready.then(
        () => super.connect(callback),
        (err: Error) => callback(err),
      );
    }
  }
  return PreferTlsClient;
}

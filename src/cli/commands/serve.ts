/** `atomic serve [--port 4317] [--host 127.0.0.1] [--open]`: the status page and API until Ctrl-C. */

import { defineCommand } from "citty";
import { session } from "../session.ts";
import { SERVE_ARGS, openLoginInBrowser, startCliServer, untilSignal } from "../status-server.ts";

export default defineCommand({
  meta: { name: "serve", description: "Serve the status page, JSON API and event streams" },
  args: {
    ...SERVE_ARGS,
    open: { type: "boolean", description: "open the page in a browser" },
  },
  async run({ args }) {
    const s = session();
    // Listen for Ctrl-C before the URL is printed: whoever reads it may stop us at once.
    const stopRequested = untilSignal();
    const server = await startCliServer(s, args);
    if (s.globals.json) {
      s.json({ type: "serving", url: server.url, loginUrl: server.loginUrl(), host: server.host, port: server.port, tokenFile: server.tokenPath });
    } else {
      // The login URL signs a browser in (a session cookie); keep it to yourself like a password.
      s.result(`status page: ${server.loginUrl()}`);
      s.info(s.style.dim(`open the link above to sign in · JSON API under ${server.url}api/ with Authorization: Bearer <the token in ${server.tokenPath}> · Ctrl-C stops`));
    }
    if (args.open) openLoginInBrowser(s, server);
    const signal = await stopRequested;
    await server.stop();
    if (s.globals.json) s.json({ type: "stopped", signal });
    else s.info("status server stopped");
  },
});

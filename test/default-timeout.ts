/**
 * Preloaded by bunfig.toml for every `bun test`: the suite's default limit
 * of a test (120 s, as scripts/test.sh's `--timeout 120000`), so that a
 * plain `bun test FILE` runs the tests that spawn the real binary, agent
 * CLIs or Postgres with the limit they have in the suite; bunfig.toml has
 * no timeout key of its own (docs/design/platform.md).
 */
import { setDefaultTimeout } from "bun:test";

setDefaultTimeout(120_000);

/** The current intercom protocol (protocol-only files; see v1.ts for the frames). */
export * from "./v1.ts";

import pkg from "../../package.json" with { type: "json" };

/** The product version, from package.json (bundled into the binary). */
export const VERSION: string = pkg.version;

/**
 * The paths of the files the binary embeds for init, types and check: the
 * SDK's declarations and the TypeScript compiler with its support files.
 * scripts/build.ts replaces this module's source with the one
 * scripts/types/embed.ts writes; run from source (or bundled without that
 * step) nothing is embedded, and embedded.ts generates or finds what it
 * needs in the checkout instead.
 */

export const declarations: string | null = null;

export const compiler: { exe: string; files: string; version: string; sha256: string } | null = null;

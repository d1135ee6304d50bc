/**
 * The virtual module scripts/build.ts gives the binary (scripts/types/embed.ts
 * writes it): paths of embedded files. It does not exist when running from
 * source; src/cli/project/embedded.ts imports it only inside the binary.
 */
declare module "atomic-build:typescript" {
  export const declarations: string;
  export const compiler: { exe: string; files: string; version: string; sha256: string } | null;
}

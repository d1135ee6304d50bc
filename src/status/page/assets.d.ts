// The page's assets are imported as text (`with { type: "text" }`) and embedded in the binary.
declare module "*.css" {
  const text: string;
  export default text;
}

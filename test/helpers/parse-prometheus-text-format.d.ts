/** Types of parse-prometheus-text-format 1.1.1 (the package ships none): what the tests use of it. */
declare module "parse-prometheus-text-format" {
  interface MetricFamily {
    name: string;
    help: string;
    type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED";
    metrics: unknown[];
  }
  export default function parse(text: string): MetricFamily[];
}

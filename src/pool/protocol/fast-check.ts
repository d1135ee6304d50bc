/**
 * A fast yes/no check of a message against its valibot schema, for the
 * pool's per-stage messages.
 *
 * `v.safeParse` builds an output copy and an issue list for every message;
 * in a run of short stages, on code the JIT has not optimized yet, that was
 * about 6 % of the CPU of a 500-stage fan-out. `compileCheck` walks the
 * schema once and generates the source of a predicate, which accepts a
 * value exactly when `safeParse` would succeed AND would return an equal
 * value: no unknown keys to strip, no defaults to fill in. Anything else
 * (an invalid message, extra keys, a schema kind it does not know, a pipe
 * of actions) answers false, and the caller falls back to `safeParse` for
 * the output or the error message. The schemas stay the one definition of
 * the protocol; this only skips work when there is nothing for valibot to
 * do.
 *
 * Generated code rather than a tree of closures: the processes of a pool
 * run under a scaled JIT policy (main.ts), so these checks mostly run in
 * the interpreter, where a call per field, iterator loops and destructuring
 * made checking a stage's start message cost a worker about 28 µs. The
 * generated functions test fields inline and dispatch variants with a
 * `switch`. Only the schema's own literals and keys go into the source, as
 * JSON string literals, and constants (literal values, picklists) are
 * passed in by reference.
 */

import type { GenericSchema } from "valibot";

export type Check = (value: unknown) => boolean;

interface SchemaShape {
  type: string;
  pipe?: unknown[];
  entries?: Record<string, SchemaShape>;
  wrapped?: SchemaShape;
  default?: unknown;
  key?: string | SchemaShape;
  value?: SchemaShape;
  options?: readonly (SchemaShape | string | number)[];
  item?: SchemaShape;
  literal?: unknown;
}

const never: Check = () => false;
/** Schema kinds whose accepted values valibot returns unchanged, whatever else is around them. */
const PLAIN: ReadonlySet<string> = new Set(["string", "number", "boolean", "literal", "picklist"]);

/** The predicate for `schema`; one that always answers false when the schema uses something it does not know. */
export function compileCheck(schema: GenericSchema): Check {
  const g = new Generator();
  const main = g.fn(schema as unknown as SchemaShape);
  if (!main) return never;
  const source = `${g.functions.join("\n")}\nreturn ${main};`;
  return new Function("c", source)(g.constants) as Check;
}

class Generator {
  readonly functions: string[] = [];
  readonly constants: unknown[] = [];

  /** The name of a generated function checking its argument against `s`; undefined when `s` is not supported. */
  fn(s: SchemaShape): string | undefined {
    const name = `f${this.functions.length}`;
    this.functions.push(""); // reserve the slot: nested schemas add theirs after it
    const body = this.body(s);
    if (body === undefined) return undefined;
    this.functions[Number(name.slice(1))] = `function ${name}(v) {\n${body}\n}`;
    return name;
  }

  private constant(value: unknown): string {
    this.constants.push(value);
    return `c[${this.constants.length - 1}]`;
  }

  /** A literal in the source when it can be written as one (strings, booleans, finite numbers), else a constant. */
  private literal(value: unknown): string {
    if (typeof value === "string" || typeof value === "boolean" || (typeof value === "number" && Number.isFinite(value))) return JSON.stringify(value);
    return this.constant(value);
  }

  /** A function body checking `v` against `s`. */
  private body(s: SchemaShape): string | undefined {
    if (s.pipe) return undefined; // actions (integer, minValue, ...) are valibot's to run
    if (s.type === "object") return this.objectBody(s.entries!);
    if (s.type === "variant") return this.variantBody(s.key as string, s.options as readonly SchemaShape[]);
    if (s.type === "array") {
      const item = this.expr(s.item!, "v[i]");
      // By index, not `every`: a hole is an undefined item to valibot, and `every` skips holes.
      return item && `if (!Array.isArray(v)) return false;\nfor (let i = 0; i < v.length; i++) if (!(${item})) return false;\nreturn true;`;
    }
    if (s.type === "record") {
      const key = this.expr(s.key as SchemaShape, "k");
      const value = this.expr(s.value!, "v[k]");
      if (!key || !value) return undefined;
      return `if (${notObject("v")}) return false;\nfor (const k of Object.keys(v)) if (!(${key}) || !(${value})) return false;\nreturn true;`;
    }
    const expr = this.expr(s, "v");
    return expr && `return ${expr};`;
  }

  /** A boolean expression checking `at` (an expression free of side effects, evaluated as often as needed). */
  private expr(s: SchemaShape, at: string): string | undefined {
    if (s.pipe) return undefined;
    switch (s.type) {
      case "string":
        return `typeof ${at} === "string"`;
      case "number":
        return `(typeof ${at} === "number" && ${at} === ${at})`; // valibot refuses NaN
      case "boolean":
        return `typeof ${at} === "boolean"`;
      case "unknown":
        return "true";
      case "literal":
        return `${at} === ${this.literal(s.literal)}`;
      case "picklist":
        return `${this.constant(new Set(s.options as readonly unknown[]))}.has(${at})`;
      case "optional":
      case "nullable": {
        if (s.default !== undefined) return undefined; // valibot would fill it in
        const inner = this.expr(s.wrapped!, at);
        return inner && `(${at} === ${s.type === "optional" ? "undefined" : "null"} || ${inner})`;
      }
      case "union": {
        // Only unions of plain values (a stage's env: a string or true): valibot returns the value
        // unchanged from whichever option takes it. An option that could strip keys is valibot's to decide.
        const options = s.options as readonly SchemaShape[];
        if (!options.every((o) => PLAIN.has(o.type))) return undefined;
        const parts = options.map((o) => this.expr(o, at));
        return parts.every((p) => p !== undefined) ? `(${parts.join(" || ")})` : undefined;
      }
      case "object":
      case "variant":
      case "array":
      case "record": {
        const name = this.fn(s);
        return name && `${name}(${at})`;
      }
      default:
        return undefined;
    }
  }

  private objectBody(entries: Record<string, SchemaShape>): string | undefined {
    const lines = [`if (${notObject("v")}) return false;`];
    for (const [key, schema] of Object.entries(entries)) {
      const check = this.expr(schema, `v[${JSON.stringify(key)}]`);
      if (!check) return undefined;
      lines.push(`if (!(${check})) return false;`);
    }
    // An unknown key would be stripped by valibot: its output would differ.
    const known = Object.keys(entries).map((k) => `case ${JSON.stringify(k)}:`).join(" ");
    lines.push(known ? `for (const k in v) switch (k) { ${known} continue; default: return false; }` : "for (const k in v) return false;", "return true;");
    return lines.join("\n");
  }

  private variantBody(key: string, options: readonly SchemaShape[]): string | undefined {
    const at = `v[${JSON.stringify(key)}]`;
    const lines = [`if (${notObject("v")}) return false;`];
    const literalTags = options.every((o) => o.type === "object" && o.entries?.[key]?.type === "literal" && !o.entries[key]!.pipe);
    if (literalTags) lines.push(`switch (${at}) {`);
    for (const option of options) {
      const discriminator = option.type === "object" ? option.entries?.[key] : undefined;
      const tag = discriminator && this.expr(discriminator, at);
      const whole = this.fn(option);
      if (!tag || !whole) return undefined;
      // The first option whose tag matches decides, as in valibot.
      if (literalTags) lines.push(`case ${this.literal(discriminator.literal)}: return ${whole}(v);`);
      else lines.push(`if (${tag}) return ${whole}(v);`);
    }
    if (literalTags) lines.push("}");
    lines.push("return false;");
    return lines.join("\n");
  }
}

function notObject(at: string): string {
  return `typeof ${at} !== "object" || ${at} === null || Array.isArray(${at})`;
}

/**
 * A fast yes/no check of a message against its valibot schema, for the
 * pool's per-stage messages.
 *
 * `v.safeParse` builds an output copy and an issue list for every message;
 * in a run of short stages, on code the JIT has not optimized yet, that was
 * about 6 % of the CPU of a 500-stage fan-out. `compileCheck` walks the
 * schema once and returns a predicate made of plain closures, which accepts
 * a value exactly when `safeParse` would succeed AND would return an equal
 * value: no unknown keys to strip, no defaults to fill in. Anything else
 * (an invalid message, extra keys, a schema kind it does not know, a pipe
 * of actions) answers false, and the caller falls back to `safeParse` for
 * the output or the error message. The schemas stay the one definition of
 * the protocol; this only skips work when there is nothing for valibot to
 * do.
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

/** The predicate for `schema`; one that always answers false when the schema uses something it does not know. */
export function compileCheck(schema: GenericSchema): Check {
  return compile(schema as unknown as SchemaShape) ?? never;
}

function compile(s: SchemaShape): Check | undefined {
  if (s.pipe) return undefined; // actions (integer, minValue, ...) are valibot's to run
  switch (s.type) {
    case "string":
      return (x) => typeof x === "string";
    case "number":
      return (x) => typeof x === "number" && !Number.isNaN(x);
    case "boolean":
      return (x) => typeof x === "boolean";
    case "unknown":
      return () => true;
    case "literal": {
      const lit = s.literal;
      return (x) => x === lit;
    }
    case "picklist": {
      const options = new Set(s.options as readonly unknown[]);
      return (x) => options.has(x);
    }
    case "optional": {
      if (s.default !== undefined) return undefined; // valibot would fill it in
      const inner = compile(s.wrapped!);
      return inner && ((x) => x === undefined || inner(x));
    }
    case "nullable": {
      if (s.default !== undefined) return undefined;
      const inner = compile(s.wrapped!);
      return inner && ((x) => x === null || inner(x));
    }
    case "array": {
      const item = compile(s.item!);
      // By index, not `every`: a hole is an undefined item to valibot, and `every` skips holes.
      return (
        item &&
        ((x) => {
          if (!Array.isArray(x)) return false;
          for (let i = 0; i < x.length; i++) if (!item(x[i])) return false;
          return true;
        })
      );
    }
    case "record": {
      const key = compile(s.key as SchemaShape);
      const value = compile(s.value!);
      if (!key || !value) return undefined;
      return (x) => isPlainObject(x) && Object.entries(x).every(([k, v]) => key(k) && value(v));
    }
    case "object":
      return compileObject(s.entries!);
    case "variant":
      return compileVariant(s.key as string, s.options as readonly SchemaShape[]);
    default:
      return undefined;
  }
}

function compileObject(entries: Record<string, SchemaShape>): Check | undefined {
  const checks: [string, Check][] = [];
  for (const [key, schema] of Object.entries(entries)) {
    const check = compile(schema);
    if (!check) return undefined;
    checks.push([key, check]);
  }
  const known = new Set(Object.keys(entries));
  return (x) => {
    if (!isPlainObject(x)) return false;
    for (const [key, check] of checks) if (!check(x[key])) return false;
    // An unknown key would be stripped by valibot: its output would differ.
    for (const key in x) if (!known.has(key)) return false;
    return true;
  };
}

function compileVariant(key: string, options: readonly SchemaShape[]): Check | undefined {
  const branches: [Check, Check][] = [];
  for (const option of options) {
    const discriminator = option.type === "object" ? option.entries?.[key] : undefined;
    const tag = discriminator && compile(discriminator);
    const whole = compile(option);
    if (!tag || !whole) return undefined;
    branches.push([tag, whole]);
  }
  return (x) => {
    if (!isPlainObject(x)) return false;
    const value = x[key];
    for (const [tag, whole] of branches) if (tag(value)) return whole(x);
    return false;
  };
}

function isPlainObject(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

/**
 * Tool schema rules (S1 §3.1, S5 Tool Surface), checked on the JSON Schema a
 * tool offers the model. Pure, so the registry's tests, the policy engine and
 * the docs can all use it:
 *
 * - `top_level_object`: the input is `type: "object"` with `additionalProperties: false`.
 * - `property_named_format`: no property anywhere is named `format` (a JSON Schema keyword that some model APIs reject).
 * - `enum_union`: no `anyOf`/`oneOf` whose branches are all string constants — that is a string enum.
 * - `primitive_union`: no union of primitive types (`anyOf`/`oneOf` of scalar branches, or `type: [...]` with several types).
 * - `missing_description`: every property, at any depth, has a non-empty description.
 *
 * A union of object shapes is not flagged: S1 says to avoid unions "where possible", and a
 * choice between structures cannot be an enum.
 */

export const SCHEMA_RULES = {
  top_level_object: 'the input schema must be type "object" with additionalProperties: false',
  property_named_format: 'no property may be named "format"',
  enum_union: "a union of string constants must be a string enum",
  primitive_union: "no unions of primitive types",
  missing_description: "every property needs a description",
} as const;

export type SchemaRule = keyof typeof SCHEMA_RULES;

export interface SchemaViolation {
  rule: SchemaRule;
  /** JSON Pointer of the offending schema node, e.g. `#/properties/to/items`. */
  path: string;
  message: string;
}

const PRIMITIVE_TYPES = new Set(["string", "number", "integer", "boolean", "null"]);
/** Keywords whose value is one subschema. */
const SUBSCHEMA_KEYWORDS = ["items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedItems"];
/** Keywords whose value is an array of subschemas. */
const SUBSCHEMA_ARRAY_KEYWORDS = ["anyOf", "oneOf", "allOf", "prefixItems"];
/** Keywords whose value maps names to subschemas (`properties` is handled on its own). */
const SUBSCHEMA_MAP_KEYWORDS = ["$defs", "definitions", "patternProperties", "dependentSchemas"];

type Node = Record<string, unknown>;

const isNode = (value: unknown): value is Node => typeof value === "object" && value !== null && !Array.isArray(value);
const pointer = (path: string, ...parts: (string | number)[]) =>
  [path, ...parts.map((p) => String(p).replaceAll("~", "~0").replaceAll("/", "~1"))].join("/");

/** Every rule `schema` breaks, in document order; empty when it complies. */
export function checkToolSchema(schema: unknown): SchemaViolation[] {
  const violations: SchemaViolation[] = [];
  const add = (rule: SchemaRule, path: string, detail?: string) =>
    violations.push({ rule, path, message: detail ? `${SCHEMA_RULES[rule]} (${detail})` : SCHEMA_RULES[rule] });

  if (!isNode(schema) || schema.type !== "object" || schema.additionalProperties !== false) add("top_level_object", "#");
  if (isNode(schema)) walk(schema, "#", add);
  return violations;
}

function walk(node: Node, path: string, add: (rule: SchemaRule, path: string, detail?: string) => void): void {
  if (Array.isArray(node.type) && node.type.length > 1) add("primitive_union", pointer(path, "type"), `type: ${JSON.stringify(node.type)}`);

  for (const keyword of ["anyOf", "oneOf"] as const) {
    const branches = node[keyword];
    if (!Array.isArray(branches) || branches.length < 2) continue;
    if (branches.every(isStringConstant)) add("enum_union", pointer(path, keyword), `${keyword} of string constants`);
    else if (branches.every(isPrimitive)) add("primitive_union", pointer(path, keyword), `${keyword} of primitive types`);
  }

  if (isNode(node.properties)) {
    for (const [name, sub] of Object.entries(node.properties)) {
      const at = pointer(path, "properties", name);
      if (name === "format") add("property_named_format", at);
      if (!isNode(sub) || typeof sub.description !== "string" || sub.description.trim() === "") add("missing_description", at, name);
      if (isNode(sub)) walk(sub, at, add);
    }
  }
  for (const keyword of SUBSCHEMA_KEYWORDS) {
    const sub = node[keyword];
    if (isNode(sub)) walk(sub, pointer(path, keyword), add);
  }
  // `items` as an array is the draft-07 tuple form.
  for (const keyword of [...SUBSCHEMA_ARRAY_KEYWORDS, "items"]) {
    const subs = node[keyword];
    if (!Array.isArray(subs)) continue;
    for (const [i, sub] of subs.entries()) if (isNode(sub)) walk(sub, pointer(path, keyword, i), add);
  }
  for (const keyword of SUBSCHEMA_MAP_KEYWORDS) {
    const map = node[keyword];
    if (isNode(map)) for (const [name, sub] of Object.entries(map)) if (isNode(sub)) walk(sub, pointer(path, keyword, name), add);
  }
}

/** A branch that only admits one string: `{const: "a"}` or `{enum: ["a"]}`. */
function isStringConstant(branch: unknown): boolean {
  if (!isNode(branch)) return false;
  if (typeof branch.const === "string") return true;
  return Array.isArray(branch.enum) && branch.enum.length > 0 && branch.enum.every((v) => typeof v === "string");
}

/** A branch that admits only scalars: a primitive `type`, or a `const`/`enum` of scalars, with no structure of its own. */
function isPrimitive(branch: unknown): boolean {
  if (!isNode(branch)) return false;
  if (["properties", "items", "prefixItems", "anyOf", "oneOf", "allOf", "$ref"].some((k) => k in branch)) return false;
  const scalar = (v: unknown) => v === null || ["string", "number", "boolean"].includes(typeof v);
  if ("const" in branch) return scalar(branch.const);
  if (Array.isArray(branch.enum)) return branch.enum.every(scalar);
  const types = Array.isArray(branch.type) ? branch.type : [branch.type];
  return types.length > 0 && types.every((t) => typeof t === "string" && PRIMITIVE_TYPES.has(t));
}

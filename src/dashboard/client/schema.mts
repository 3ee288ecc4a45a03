/**
 * JSON Schemas (OpenAPI 3.1) as readable, TypeScript-like text — `$ref`s to components resolved in place and named,
 * constraints as `//` notes — and a sample value for a "try it" body.
 */

export type Schema = Record<string, unknown>;
export type Doc = { components?: { schemas?: Record<string, Schema> } } & Record<string, unknown>;

/** How deep nested references are expanded before only their name is shown. */
const MAX_DEPTH = 8;

/** The component a local `$ref` (`#/components/schemas/Job`) points at, or null. */
export function resolveRef(doc: Doc, ref: string): Schema | null {
  if (!ref.startsWith("#/")) return null;
  let node: unknown = doc;
  for (const raw of ref.slice(2).split("/")) {
    const key = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    if (node === null || typeof node !== "object" || !Object.hasOwn(node, key)) return null;
    node = (node as Record<string, unknown>)[key];
  }
  return node !== null && typeof node === "object" ? (node as Schema) : null;
}

/** A schema's constraints and description, as a short note. */
function notes(s: Schema): string {
  const out: string[] = [];
  if (typeof s.description === "string") out.push(s.description);
  if (typeof s.format === "string") out.push(`format ${s.format}`);
  if (typeof s.pattern === "string") out.push(`pattern ${s.pattern}`);
  const range = (lo: unknown, hi: unknown, unit: string) => {
    if (lo === undefined && hi === undefined) return;
    out.push(lo !== undefined && hi !== undefined ? `${lo}–${hi}${unit}` : lo !== undefined ? `≥ ${lo}${unit}` : `≤ ${hi}${unit}`);
  };
  range(s.minLength, s.maxLength, " chars");
  range(s.minimum, s.maximum, "");
  range(s.minItems, s.maxItems, " items");
  if (s.exclusiveMinimum !== undefined) out.push(`> ${s.exclusiveMinimum}`);
  if (s.exclusiveMaximum !== undefined) out.push(`< ${s.exclusiveMaximum}`);
  if (s.default !== undefined) out.push(`default ${JSON.stringify(s.default)}`);
  if (s.example !== undefined) out.push(`e.g. ${JSON.stringify(s.example)}`);
  return out.join("; ");
}

const isSchema = (v: unknown): v is Schema => v !== null && typeof v === "object" && !Array.isArray(v);

/** The schema as text; `indent` is the current line's indentation, `seen` the refs being expanded (cycles stop there). */
export function schemaText(s: unknown, doc: Doc, indent = "", seen: readonly string[] = []): string {
  if (s === true || (isSchema(s) && Object.keys(s).length === 0)) return "any";
  if (!isSchema(s)) return "never";
  if (typeof s.$ref === "string") {
    const name = s.$ref.split("/").pop() ?? s.$ref;
    const target = resolveRef(doc, s.$ref);
    if (!target || seen.includes(s.$ref) || seen.length >= MAX_DEPTH) return name;
    return `${name} ${schemaText(target, doc, indent, [...seen, s.$ref])}`;
  }
  if (s.const !== undefined) return JSON.stringify(s.const);
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  for (const [key, sep] of [
    ["anyOf", " | "],
    ["oneOf", " | "],
    ["allOf", " & "],
  ] as const) {
    const parts = s[key];
    if (Array.isArray(parts)) return parts.map((p) => schemaText(p, doc, indent, seen)).join(sep);
  }
  const types = Array.isArray(s.type) ? (s.type as string[]) : typeof s.type === "string" ? [s.type] : [];
  const nullable = types.includes("null");
  const main = types.filter((t) => t !== "null");
  let text: string;
  if (main.includes("object") || isSchema(s.properties)) text = objectText(s, doc, indent, seen);
  else if (main.includes("array")) {
    const item = schemaText(s.items ?? {}, doc, indent, seen);
    text = /[|&\s]/.test(item) && !item.endsWith("}") ? `(${item})[]` : `${item}[]`;
  } else text = main.length > 0 ? main.join(" | ") : "any";
  return nullable ? `${text} | null` : text;
}

function objectText(s: Schema, doc: Doc, indent: string, seen: readonly string[]): string {
  const props = isSchema(s.properties) ? Object.entries(s.properties) : [];
  const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
  const inner = `${indent}  `;
  const lines: string[] = [];
  for (const [name, prop] of props) {
    const note = isSchema(prop) ? notes(prop) : "";
    lines.push(`${inner}${name}${required.has(name) ? "" : "?"}: ${schemaText(prop, doc, inner, seen)}${note ? `  // ${note}` : ""}`);
  }
  const extra = s.additionalProperties;
  if (extra !== undefined && extra !== false) lines.push(`${inner}[key: string]: ${schemaText(extra, doc, inner, seen)}`);
  if (lines.length === 0) return "{}";
  return `{\n${lines.join("\n")}\n${indent}}`;
}

/** The schema's own note (for the top of a body or a parameter). */
export function schemaNote(s: unknown, doc: Doc): string {
  if (!isSchema(s)) return "";
  const target = typeof s.$ref === "string" ? resolveRef(doc, s.$ref) : s;
  return target ? notes(target) : "";
}

/** A plausible value for the schema: its example, default, const or first option; objects with their required fields. */
export function sample(s: unknown, doc: Doc, depth = 0): unknown {
  if (!isSchema(s) || depth > MAX_DEPTH) return null;
  if (typeof s.$ref === "string") return sample(resolveRef(doc, s.$ref), doc, depth + 1);
  if (s.example !== undefined) return s.example;
  if (Array.isArray(s.examples) && s.examples.length > 0) return s.examples[0];
  if (s.default !== undefined) return s.default;
  if (s.const !== undefined) return s.const;
  if (Array.isArray(s.enum)) return s.enum[0];
  for (const key of ["anyOf", "oneOf"] as const) {
    const parts = s[key];
    if (Array.isArray(parts) && parts.length > 0) return sample(parts[0], doc, depth + 1);
  }
  if (Array.isArray(s.allOf)) return Object.assign({}, ...s.allOf.map((p) => sample(p, doc, depth + 1)));
  const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type];
  if (types.includes("object") || isSchema(s.properties)) {
    const props = isSchema(s.properties) ? s.properties : {};
    const required = Array.isArray(s.required) ? (s.required as string[]) : Object.keys(props);
    return Object.fromEntries(required.filter((k) => Object.hasOwn(props, k)).map((k) => [k, sample(props[k], doc, depth + 1)]));
  }
  if (types.includes("array")) return [];
  if (types.includes("string")) return "";
  if (types.includes("integer") || types.includes("number")) return typeof s.minimum === "number" ? s.minimum : 0;
  if (types.includes("boolean")) return false;
  return null;
}

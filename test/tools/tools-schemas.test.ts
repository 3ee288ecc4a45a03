/**
 * S1 §3.1 / S5 Tool Surface schema rules over EVERY registered tool, with the
 * checker (`src/tools/schema-rules.ts`) proven on hand-made bad schemas; and
 * every tool name namespaced with a legal wire name.
 */

import { describe, expect, it } from "vitest";
import { z } from "zod";
import "../../src/tools/builtin";
import { toolJsonSchema, tools } from "../../src/tools/registry";
import { checkToolSchema, SCHEMA_RULES } from "../../src/tools/schema-rules";
import { toWireName, wireNameMap } from "../../src/tools/wire-names";

const TOOL_NAME = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$/;
/** S5's contract tools keep their own un-namespaced names (DESIGN "Tool names"). */
const S5_TOP_LEVEL = new Set(["verify", "save_snapshot", "save_service_commands", "save_env_files", "request_env_variables"]);
const registered = tools.list();

describe("S1 §3.1 / S5 schema rules hold for every registered tool", () => {
  it("the walk covers the built-in tools", () => {
    expect(registered.map((t) => t.name)).toEqual(
      expect.arrayContaining(["email.draft", "fs.list_dir", "fs.read_text", "fs.write_text", "shell.exec"]),
    );
  });

  for (const tool of registered) {
    it(`${tool.name}: strict object input, no property named format, no enum-like or primitive unions, every property described`, () => {
      expect(checkToolSchema(tool.parameters)).toEqual([]);
    });

    it(`${tool.name}: name matches ${TOOL_NAME.source} and has a legal wire name`, () => {
      expect(tool.name).toMatch(S5_TOP_LEVEL.has(tool.name) ? /^[a-z][a-z0-9_]*$/ : TOOL_NAME);
      expect(toWireName(tool.name)).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
      for (const alias of tool.aliases ?? []) expect(toWireName(alias)).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    });

    it(`${tool.name}: has a description and a known risk class`, () => {
      expect(tool.description.trim()).not.toBe("");
      expect(["read_only", "draft_only", "side_effect"]).toContain(tool.risk);
    });
  }

  it("no two registered names or aliases share a wire name", () => {
    expect(() => wireNameMap(registered.flatMap((t) => [t.name, ...(t.aliases ?? [])]))).not.toThrow();
  });
});

describe("the schema-rule checker catches each violation", () => {
  const ok = (properties: Record<string, unknown>) => ({ type: "object", properties, additionalProperties: false });
  const str = { type: "string", description: "a string" };

  it("a compliant schema has no violations, including a string enum and a union of object shapes", () => {
    expect(
      checkToolSchema(
        ok({
          mode: { type: "string", enum: ["a", "b"], description: "mode" },
          nested: { type: "object", properties: { x: str }, additionalProperties: false, description: "nested" },
          shape: {
            anyOf: [ok({ a: str }), ok({ b: str })],
            description: "one of two shapes",
          },
        }),
      ),
    ).toEqual([]);
  });

  it("property_named_format: at the top and at any depth", () => {
    expect(checkToolSchema(ok({ format: str }))).toEqual([
      { rule: "property_named_format", path: "#/properties/format", message: SCHEMA_RULES.property_named_format },
    ]);
    const nested = ok({
      files: { type: "array", description: "files", items: ok({ format: { type: "string", enum: ["dotenv"], description: "kind" } }) },
    });
    expect(checkToolSchema(nested)).toEqual([
      { rule: "property_named_format", path: "#/properties/files/items/properties/format", message: SCHEMA_RULES.property_named_format },
    ]);
    // `format` as a keyword (a string's format) is not a property and is fine.
    expect(checkToolSchema(ok({ email: { type: "string", format: "email", description: "address" } }))).toEqual([]);
  });

  it("enum_union: anyOf/oneOf whose branches are all string constants", () => {
    const anyOf = ok({ mode: { anyOf: [{ type: "string", const: "a" }, { const: "b" }], description: "mode" } });
    expect(checkToolSchema(anyOf)).toEqual([
      { rule: "enum_union", path: "#/properties/mode/anyOf", message: `${SCHEMA_RULES.enum_union} (anyOf of string constants)` },
    ]);
    const oneOf = ok({ mode: { oneOf: [{ enum: ["a"] }, { enum: ["b", "c"] }], description: "mode" } });
    expect(checkToolSchema(oneOf)).toEqual([
      { rule: "enum_union", path: "#/properties/mode/oneOf", message: `${SCHEMA_RULES.enum_union} (oneOf of string constants)` },
    ]);
    // What zod emits for a union of literals.
    const zodUnion = toolJsonSchema(z.strictObject({ mode: z.union([z.literal("a"), z.literal("b")]).describe("mode") }));
    expect(checkToolSchema(zodUnion).map((v) => [v.rule, v.path])).toEqual([["enum_union", "#/properties/mode/anyOf"]]);
  });

  it("primitive_union: unions of scalar types, in anyOf/oneOf or as a type array", () => {
    const anyOf = ok({ n: { anyOf: [{ type: "string" }, { type: "number" }], description: "n" } });
    expect(checkToolSchema(anyOf)).toEqual([
      { rule: "primitive_union", path: "#/properties/n/anyOf", message: `${SCHEMA_RULES.primitive_union} (anyOf of primitive types)` },
    ]);
    const mixedConst = ok({ n: { oneOf: [{ const: 1 }, { const: "one" }, { type: "null" }], description: "n" } });
    expect(checkToolSchema(mixedConst).map((v) => [v.rule, v.path])).toEqual([["primitive_union", "#/properties/n/oneOf"]]);
    const typeArray = ok({ n: { type: ["string", "null"], description: "n" } });
    expect(checkToolSchema(typeArray)).toEqual([
      { rule: "primitive_union", path: "#/properties/n/type", message: `${SCHEMA_RULES.primitive_union} (type: ["string","null"])` },
    ]);
    // What zod emits for .nullable() and for a union of primitives.
    const zodNullable = toolJsonSchema(
      z.strictObject({ a: z.string().nullable().describe("a"), b: z.union([z.string(), z.int()]).describe("b") }),
    );
    expect(checkToolSchema(zodNullable).map((v) => [v.rule, v.path])).toEqual([
      ["primitive_union", "#/properties/a/type"],
      ["primitive_union", "#/properties/b/anyOf"],
    ]);
  });

  it("top_level_object: not an object, or an object that admits unknown properties", () => {
    const violation = [{ rule: "top_level_object", path: "#", message: SCHEMA_RULES.top_level_object }];
    expect(checkToolSchema({ type: "string" })).toEqual(violation);
    expect(checkToolSchema({ type: "object", properties: { a: str } })).toEqual(violation);
    expect(checkToolSchema({ type: "object", properties: { a: str }, additionalProperties: true })).toEqual(violation);
    expect(checkToolSchema({ type: "object", properties: { a: str }, additionalProperties: {} })).toEqual(violation);
    expect(checkToolSchema(null)).toEqual(violation);
    expect(checkToolSchema([])).toEqual(violation);
    // What zod emits for a non-strict object.
    expect(checkToolSchema(toolJsonSchema(z.object({ a: z.string().describe("a") })))).toEqual(violation);
  });

  it("missing_description: on any property at any depth; an empty description counts as missing", () => {
    const schema = ok({
      a: { type: "string" },
      b: { type: "string", description: "  " },
      c: { type: "array", description: "c", items: ok({ d: { type: "integer" } }) },
      e: { type: "object", description: "e", properties: { f: { type: "boolean" } }, additionalProperties: false },
    });
    expect(checkToolSchema(schema)).toEqual([
      { rule: "missing_description", path: "#/properties/a", message: `${SCHEMA_RULES.missing_description} (a)` },
      { rule: "missing_description", path: "#/properties/b", message: `${SCHEMA_RULES.missing_description} (b)` },
      { rule: "missing_description", path: "#/properties/c/items/properties/d", message: `${SCHEMA_RULES.missing_description} (d)` },
      { rule: "missing_description", path: "#/properties/e/properties/f", message: `${SCHEMA_RULES.missing_description} (f)` },
    ]);
    expect(checkToolSchema(toolJsonSchema(z.strictObject({ a: z.string() }))).map((v) => v.rule)).toEqual(["missing_description"]);
  });

  it("walks $defs, allOf and tuple items too", () => {
    const schema = {
      ...ok({ a: { $ref: "#/$defs/A", description: "a" } }),
      $defs: { A: ok({ format: { type: "string" } }) },
      allOf: [ok({ u: { anyOf: [{ const: "x" }, { const: "y" }], description: "u" } })],
    };
    expect(checkToolSchema(schema).map((v) => [v.rule, v.path])).toEqual([
      ["enum_union", "#/allOf/0/properties/u/anyOf"],
      ["property_named_format", "#/$defs/A/properties/format"],
      ["missing_description", "#/$defs/A/properties/format"],
    ]);
  });

  it("reports every violation of a schema that breaks all the rules", () => {
    const bad = { type: "object", properties: { format: { anyOf: [{ const: "a" }, { const: "b" }] } } };
    expect(checkToolSchema(bad).map((v) => v.rule)).toEqual([
      "top_level_object",
      "property_named_format",
      "missing_description",
      "enum_union",
    ]);
  });
});

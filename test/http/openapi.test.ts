/**
 * The OpenAPI 3.1 document (DESIGN §3; issue 11 item 2): generated from the routes' own Zod schemas, served at
 * /openapi.json, complete — an API route registered without documentation fails here — and valid against the
 * official OpenAPI 3.1 meta-schema, with every Schema Object valid against JSON Schema 2020-12
 * (test/fixtures/openapi-3.1/README.md says where those files come from and what this check covers).
 */

import { env } from "cloudflare:workers";
import { type Schema, Validator } from "@cfworker/json-schema";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/http/app";
import { scopeOfPath } from "../../src/http/openapi";
import { createLogger } from "../../src/observability/logger";
import applicatorVocabulary from "../fixtures/openapi-3.1/json-schema-2020-12/meta/applicator.json";
import contentVocabulary from "../fixtures/openapi-3.1/json-schema-2020-12/meta/content.json";
import coreVocabulary from "../fixtures/openapi-3.1/json-schema-2020-12/meta/core.json";
import formatAnnotationVocabulary from "../fixtures/openapi-3.1/json-schema-2020-12/meta/format-annotation.json";
import metaDataVocabulary from "../fixtures/openapi-3.1/json-schema-2020-12/meta/meta-data.json";
import unevaluatedVocabulary from "../fixtures/openapi-3.1/json-schema-2020-12/meta/unevaluated.json";
import validationVocabulary from "../fixtures/openapi-3.1/json-schema-2020-12/meta/validation.json";
import jsonSchema202012 from "../fixtures/openapi-3.1/json-schema-2020-12/schema.json";
import oas31Schema from "../fixtures/openapi-3.1/schema.json";

const app = createApp({ logger: createLogger("error") });

async function document(): Promise<any> {
  const res = await app.request("https://gateway.test/openapi.json", {}, env);
  expect(res.status).toBe(200);
  return res.json();
}

/**
 * Pages that are not API operations, so not in the document: the dashboard (`GET /admin`, `/admin/assets/*`) and
 * the API reference (`GET /docs`, `/docs/assets/*`), plain Hono routes of src/http/dashboard.ts. The rule is by
 * path: `/admin` or `/docs`, alone or followed by `/`. The admin API lives under `/api/admin/` and is not excluded.
 */
const NOT_API = /^\/(admin|docs)(\/|$)/;

/** Hono's registered handlers (middleware excluded), as OpenAPI method + path. */
function registered(): string[] {
  const seen = new Set<string>();
  for (const r of app.routes) {
    if (r.method === "ALL") continue;
    seen.add(`${r.method.toLowerCase()} ${r.path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")}`);
  }
  return [...seen].sort();
}

const JSON_SCHEMA_2020_12 = "https://json-schema.org/draft/2020-12/schema";

/**
 * @cfworker/json-schema implements 2020-12 but not `$dynamicRef`. Every `$dynamicRef` in the vendored files is
 * `"#meta"`, and for a document validated as OpenAPI 3.1 with JSON Schema 2020-12 as the Schema Object dialect the
 * outermost `meta` dynamic anchor is the 2020-12 meta-schema's root; this resolves each one statically to that
 * (the file on disk stays as published). The OAS meta-schema's own `$defs/schema` (object or boolean) is implied.
 */
function staticMetaRefs(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(staticMetaRefs);
  if (node === null || typeof node !== "object") return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    // (A "$dynamicRef" whose value is an object is the core vocabulary describing the keyword, not using it.)
    if (key === "$dynamicRef" && typeof value === "string") {
      if (value !== "#meta") throw new Error(`unexpected $dynamicRef ${value}`);
      out.$ref = JSON_SCHEMA_2020_12;
    } else out[key] = staticMetaRefs(value);
  }
  return out;
}

function oas31Validator(): Validator {
  const validator = new Validator(staticMetaRefs(oas31Schema) as Schema, "2020-12", false);
  for (const schema of [
    jsonSchema202012,
    coreVocabulary,
    applicatorVocabulary,
    unevaluatedVocabulary,
    validationVocabulary,
    metaDataVocabulary,
    formatAnnotationVocabulary,
    contentVocabulary,
  ]) {
    validator.addSchema(staticMetaRefs(schema) as Schema);
  }
  return validator;
}

/** The validator's findings as "where: what", without the "A subschema had errors." entries that only point further down. */
function findings(doc: unknown): string[] {
  const result = oas31Validator().validate(doc);
  return result.errors.filter((e) => e.error !== "A subschema had errors.").map((e) => `${e.instanceLocation}: ${e.error}`);
}

/** Whether `schema` (a $ref into the components, or inline) is the S3 error envelope {"error":{"code","message"}}. */
function isErrorEnvelope(doc: any, schema: any): boolean {
  const resolved = typeof schema?.$ref === "string" ? doc.components.schemas[schema.$ref.replace("#/components/schemas/", "")] : schema;
  const error = resolved?.properties?.error;
  return (
    resolved?.type === "object" &&
    (resolved.required ?? []).includes("error") &&
    error?.type === "object" &&
    ["code", "message"].every((f) => (error.required ?? []).includes(f) && error.properties?.[f]?.type === "string")
  );
}

describe("OpenAPI 3.1 at /openapi.json", () => {
  it("every registered API route is documented, and nothing undocumented is served", async () => {
    const doc = await document();
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
      .flatMap(([path, item]) => Object.keys(item).map((method) => `${method} ${path}`))
      .sort();
    const pages = registered().filter((route) => NOT_API.test(route.split(" ")[1] ?? ""));
    const api = registered().filter((route) => !pages.includes(route));
    expect(api).toEqual(documented);
    console.log(`openapi: ${documented.filter((r) => api.includes(r)).length} of ${api.length} registered API routes documented`);
    console.log(`openapi: ${pages.length} page routes left out: ${pages.join(", ") || "none"}`);
    // Pages are only read: nothing but GET is left out of the document.
    expect(pages.filter((route) => !route.startsWith("get "))).toEqual([]);
    expect(documented.length).toBeGreaterThanOrEqual(30);
  });

  it("the page rule excludes exactly /admin, /docs and what is under them, never the admin API", () => {
    expect(["/admin", "/admin/assets/app.js", "/docs", "/docs/assets/x.css"].filter((p) => NOT_API.test(p))).toHaveLength(4);
    expect(["/api/admin/jobs", "/administrator", "/docsx", "/v1/docs"].filter((p) => NOT_API.test(p))).toEqual([]);
  });

  it("validates against the official OpenAPI 3.1 meta-schema, every Schema Object against JSON Schema 2020-12", async () => {
    const doc = await document();
    expect(findings(doc)).toEqual([]);
  });

  it("the meta-schema check is not vacuous: it rejects a broken operation, parameter, response and (nested) schema", async () => {
    const doc = await document();
    const broken = (mutate: (d: any) => void): string[] => {
      const copy = structuredClone(doc);
      mutate(copy);
      return findings(copy);
    };
    // An operation field OpenAPI does not define (only x- extensions may be added).
    expect(broken((d) => (d.paths["/healthz"].get.summray = "typo"))).toContain(
      '#/paths/~1healthz/get: Property "summray" does not match unevaluated properties schema.',
    );
    // A parameter without `in`.
    expect(broken((d) => delete d.paths["/api/admin/runs"].get.parameters[0].in)).toContain(
      '#/paths/~1api~1admin~1runs/get/parameters/0: Instance does not have required property "in".',
    );
    // A response without its required description.
    expect(broken((d) => delete d.paths["/v1/runs"].post.responses["202"].description)).toContain(
      '#/paths/~1v1~1runs/post/responses/202: Instance does not have required property "description".',
    );
    // Schema Objects against JSON Schema 2020-12: a component, a nested property, a parameter's schema.
    expect(broken((d) => (d.components.schemas.RunRequest.type = "strnig"))).toContain(
      '#/components/schemas/RunRequest/type: Instance does not match any of ["array","boolean","integer","null","number","object","string"].',
    );
    expect(broken((d) => (d.components.schemas.RunRequest.properties.message.minLength = -1))).toContain(
      "#/components/schemas/RunRequest/properties/message/minLength: -1 is less than 0.",
    );
    expect(broken((d) => (d.paths["/api/admin/runs"].get.parameters[0].schema = { required: "agent_id" }))).toContain(
      '#/paths/~1api~1admin~1runs/get/parameters/0/schema/required: Instance type "string" is invalid. Expected "array".',
    );
  });

  it("every operation documents the error envelope for at least one 4xx (only the input-less documents — this one, the JWKS — cannot fail)", async () => {
    const doc = await document();
    const missing: string[] = [];
    const inputless: string[] = [];
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(item)) {
        const documents4xx = Object.entries(op.responses as Record<string, any>).some(
          ([status, response]) => /^4\d\d$/.test(status) && isErrorEnvelope(doc, response.content?.["application/json"]?.schema),
        );
        // No parameters, no body and no credential: nothing a caller sends can be refused with a 4xx.
        if (!op.parameters?.length && !op.requestBody && op.security.length === 0) inputless.push(`${method} ${path}`);
        else if (!documents4xx) missing.push(`${method} ${path}`);
      }
    }
    expect(missing).toEqual([]);
    // D-089: the public key set takes nothing either; it can only be unavailable (503), which it documents.
    expect(inputless).toEqual(["get /.well-known/jwks.json", "get /openapi.json"]);
  });

  it("is OpenAPI 3.1 with an info block, bearer schemes and, on every operation, responses and the credential it needs", async () => {
    const doc = await document();
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info).toMatchObject({ title: "Sophie Gateway", version: "0.1.0" });
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual(["admin", "api", "sandbox"]);
    for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      for (const [method, op] of Object.entries(item)) {
        expect(Object.keys(op.responses ?? {}).length, `${method} ${path}`).toBeGreaterThan(0);
        const scope = scopeOfPath(path.replace(/\{[^}]+\}/g, "x"));
        expect(op["x-auth"], `${method} ${path}`).toBe(scope);
        expect(op.security, `${method} ${path}`).toEqual(["admin", "api", "sandbox"].includes(scope) ? [{ [scope]: [] }] : []);
      }
    }
  });

  it("the scopes match what the routes enforce: an admin route refuses an api token, an api route the admin token", async () => {
    const doc = await document();
    expect(doc.paths["/api/admin/jobs"].get["x-auth"]).toBe("admin");
    expect(doc.paths["/v1/runs"].post["x-auth"]).toBe("api");
    expect(doc.paths["/proliferate/{session_id}/tools/{tool_name}"].post["x-auth"]).toBe("sandbox");
    expect(doc.paths["/webhooks/slack/{agent_id}"].post["x-auth"]).toBe("signature");
    expect(doc.paths["/healthz"].get.security).toEqual([]);
    // Request bodies come from the same Zod schemas the routes validate with.
    expect(doc.paths["/v1/runs"].post.requestBody.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/RunRequest" });
    expect(doc.components.schemas.RunRequest.required).toEqual(["agent_id", "message"]);
  });
});

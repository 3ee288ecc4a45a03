/**
 * Hostile input (issue 12 item 4; docs/reliability.md "Hostile input (fuzz)"): every POST/PUT/DELETE operation
 * of the app's own `/openapi.json` — so a new route is fuzzed without touching this file — gets malformed and
 * hostile requests: broken JSON of every kind, wrong types for every field of its documented body, prototype keys,
 * huge, deep and odd values, wrong Content-Types, odd headers, hostile path parameters, and missing, garbage or
 * wrong-scope credentials; signature routes get bad and missing signatures and, where we hold the secret, correctly
 * signed hostile bodies. Generation is seeded (mulberry32, SEED below), so a run is reproducible.
 *
 * Every answer must be < 500 (a 503 only where the operation documents it), an S3 envelope with a known code when
 * ≥ 400 (OpenAI's `{"error":{"message","type","code"}}` with a known code on the OpenAI-compatible paths), and free
 * of stack traces and internals; afterwards the app still answers /healthz and no prototype was
 * polluted.
 */
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { signWebhook, webhookKey } from "../../src/channels/standard-webhooks";
import { ERROR_CODES } from "../../src/errors";
import { isOpenAiPath } from "../../src/openai/wire";
import { RUNNING_INDEX_DELAY_MS } from "../../src/runs/engine";
import type { SessionDO } from "../../src/sessions/SessionDO";
import { runConfig, uniqueHost } from "../support/config";
import { mulberry32 } from "../support/prng";
import { ADMIN, ALICE, type App, appFor, call, until } from "../support/runs";

const SEED = 0x12_04_f0_22;
const BASE = "https://gateway.test";
const CONCURRENCY = 8;
const label = () => crypto.randomUUID().slice(0, 8);

const config = runConfig(uniqueHost("ok"), {
  agent: { tools: { allow: [] } },
  channels: {
    telegram: { enabled: true, apiBaseUrl: `https://ok-${label()}.telegram.test` },
    slack: { enabled: true, apiBaseUrl: `https://ok-${label()}.slack.test/api` },
    standard: { enabled: true },
  },
});
const app: App = appFor(config);
const MAX_BODY = config.http.maxBodyBytes;

// ---------------------------------------------------------------------------------------------------------------
// Seeded randomness

const rand = mulberry32(SEED);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));

// ---------------------------------------------------------------------------------------------------------------
// The operations, from the document

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Schema = Record<string, any>;
interface Operation {
  method: "post" | "put" | "delete";
  path: string; // OpenAPI template, e.g. /v1/runs/{run_id}/cancel
  auth: string; // x-auth: admin | api | sandbox | signature | none
  params: string[];
  body: Schema | undefined;
  documents503: boolean;
}

function resolve(doc: any, schema: Schema | undefined): Schema | undefined {
  if (!schema) return undefined;
  if (typeof schema.$ref === "string") return resolve(doc, doc.components?.schemas?.[schema.$ref.split("/").pop() as string]);
  return schema;
}

function operations(doc: any): Operation[] {
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    for (const method of ["post", "put", "delete"] as const) {
      const op = item[method];
      if (!op) continue;
      ops.push({
        method,
        path,
        auth: op["x-auth"],
        params: (op.parameters ?? []).filter((p: any) => p.in === "path").map((p: any) => p.name),
        body: resolve(doc, op.requestBody?.content?.["application/json"]?.schema),
        documents503: Object.hasOwn(op.responses ?? {}, "503"),
      });
    }
  }
  return ops;
}

// ---------------------------------------------------------------------------------------------------------------
// Fixtures: a real session (for sandbox routes and session parameters) and plausible values

let sessionId = "";
let sandboxToken = "";

/** A plausible valid value for a field, by name and schema (the fuzzer mutates from here). */
function plausible(name: string, schema: Schema | undefined, doc: any): Json {
  const s = resolve(doc, schema) ?? {};
  const known: Record<string, Json> = {
    agent_id: "main",
    user_id: "u1",
    room_id: "r1",
    message: "hello",
    tool_call_id: `tc_${label()}`,
    name: `FUZZ_${label()
      .toUpperCase()
      .replace(/[^A-Z0-9]/g, "X")}`,
    value: "a stored value",
    session_id: sessionId,
    schedule: "@every 1h",
    decision: "deny",
    capability: "net",
    action: "grant",
  };
  if (Object.hasOwn(known, name)) return known[name] as Json;
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[0];
  if (s.const !== undefined) return s.const;
  const type = Array.isArray(s.type) ? s.type.find((t: string) => t !== "null") : s.type;
  if (s.anyOf || s.oneOf) return plausible(name, (s.anyOf ?? s.oneOf)[0], doc);
  switch (type) {
    case "string":
      return "x";
    case "integer":
    case "number":
      return typeof s.minimum === "number" ? s.minimum : 1;
    case "boolean":
      return true;
    case "array":
      return [];
    case "object": {
      const out: Record<string, Json> = {};
      for (const k of s.required ?? []) out[k] = plausible(k, s.properties?.[k], doc);
      return out;
    }
    default:
      return "x";
  }
}

/** The base body of an operation: every documented field (required or not) with a plausible value. */
function baseBody(op: Operation, doc: any): Record<string, Json> {
  if (op.auth === "signature") return signatureBase(op.path);
  const s = op.body;
  if (s?.type !== "object") return {};
  const out: Record<string, Json> = {};
  for (const [k, v] of Object.entries<Schema>(s.properties ?? {})) out[k] = plausible(k, v, doc);
  return out;
}

let updateSeq = 900_000_000 + Math.floor(rand() * 1e6);
function signatureBase(path: string): Record<string, Json> {
  if (path.includes("/telegram/"))
    return {
      update_id: ++updateSeq,
      message: { message_id: 1, date: 1_700_000_000, chat: { id: 42, type: "private" }, from: { id: 42, is_bot: false }, text: "hi" },
    };
  if (path.includes("/slack/"))
    return {
      type: "event_callback",
      team_id: "T0TEAM",
      event_id: `Ev${label()}`,
      event: { type: "message", channel: "C0CHAN", channel_type: "im", user: "U0USER", text: "hi", ts: "1700000000.000001" },
    };
  if (path.includes("/standard/")) return { user_id: "u1", room_id: "r1", message: "hi" };
  return {};
}

/** A good value for a path parameter. */
function goodParam(name: string): string {
  if (name === "session_id") return sessionId;
  if (name === "agent_id") return "main";
  if (name === "tool_name") return "verify";
  if (name === "name") return "FUZZ_NO_SUCH_SECRET";
  return `${name.replace(/_id$/, "")}_${label()}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Hostile values

const BIDI = ["\u202Emain", "ma\u200Bin", "\u2066x\u2069", "\uFEFFu1", "a\u200D\u200Cb", "\u061Cx", "\u202Ax\u202C"];
const CONTROL = ["\u0000", "a\u0000b", "\u0007\u0008", "\u001b[31mred\u001b[0m", "line\r\nX-Injected: 1", "\u007f", "\u0085\u2028\u2029"];
const LONG = (n: number) => "A".repeat(n);
const WRONG_TYPES: Json[] = ["str", "", 0, -1, 1.5, true, false, null, [], [1, "a"], {}, { a: 1 }];
/** Raw JSON number/value texts, spliced in place of a field's value. */
const RAW_VALUES = [
  "1e309",
  "-1e309",
  "18446744073709551616",
  "-9223372036854775809",
  "9007199254740993",
  "-0",
  "1e-400",
  '"NaN"',
  '"Infinity"',
  '"-0"',
  '"1e309"',
  '"\\ud800"',
  '"\\udfff\\ud800"',
  '"a\\ud83d"',
  '"\\u0000"',
];
const PROTO_KEYS = ["__proto__", "constructor", "prototype"];

/** `{"__proto__":{"polluted":true}}`-style text (JSON.parse makes an own `__proto__` property). */
const protoValue = (key: string) =>
  key === "constructor" ? `{"prototype":{"polluted":true},"polluted":true}` : `{"polluted":true,"toString":"x","hasOwnProperty":1}`;

const enc = new TextEncoder();
const concat = (...parts: (string | Uint8Array)[]) => {
  const bytes = parts.map((p) => (typeof p === "string" ? enc.encode(p) : p));
  const out = new Uint8Array(bytes.reduce((n, b) => n + b.length, 0));
  let at = 0;
  for (const b of bytes) {
    out.set(b, at);
    at += b.length;
  }
  return out;
};
const INVALID_UTF8 = [
  new Uint8Array([0xff, 0xfe]),
  new Uint8Array([0xc0, 0xaf]),
  new Uint8Array([0xed, 0xa0, 0x80]),
  new Uint8Array([0xf8, 0x88, 0x80, 0x80, 0x80]),
  new Uint8Array([0xe2, 0x82]),
];

/** The body text with field `key` replaced by raw JSON `raw`. */
function withRaw(base: Record<string, Json>, key: string, raw: string): string {
  const parts = Object.entries(base)
    .filter(([k]) => k !== key)
    .map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`);
  parts.push(`${JSON.stringify(key)}:${raw}`);
  return `{${parts.join(",")}}`;
}

/** Prototype keys at every level: the top and inside every object-valued field, recursively. */
function protoEverywhere(value: Json, key: string): string {
  if (Array.isArray(value)) return `[${value.map((v) => protoEverywhere(v, key)).join(",")}]`;
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  const parts = Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}:${protoEverywhere(v, key)}`);
  parts.push(`${JSON.stringify(key)}:${protoValue(key)}`);
  return `{${parts.join(",")}}`;
}

const deepArray = (n: number) => `${"[".repeat(n)}${"]".repeat(n)}`;
const deepObject = (n: number) => `${'{"a":'.repeat(n)}1${"}".repeat(n)}`;

// ---------------------------------------------------------------------------------------------------------------
// Cases

type Body = string | Uint8Array | null;
type Cred = "right" | "none" | { authorization: string } | "bad-signature" | "no-signature" | "stale-signature";
interface Case {
  family: string;
  op: Operation;
  path: string; // concrete, already encoded
  body: Body;
  contentType: string | null;
  cred: Cred;
  headers: Record<string, string>;
}

function concretePath(op: Operation, override: Record<string, string> = {}): string {
  return op.path.replace(/\{([^}]+)\}/g, (_, name: string) => override[name] ?? encodeURIComponent(goodParam(name)));
}

function casesFor(op: Operation, doc: any): Case[] {
  const out: Case[] = [];
  const base = () => baseBody(op, doc);
  const baseText = () => JSON.stringify(base());
  const add = (family: string, body: Body, o: Partial<Omit<Case, "family" | "op" | "body">> = {}) =>
    out.push({
      family,
      op,
      body,
      path: o.path ?? concretePath(op),
      contentType: o.contentType === undefined ? "application/json" : o.contentType,
      cred: o.cred ?? "right",
      headers: o.headers ?? {},
    });
  const fields = Object.keys(base());
  const stringFields = Object.entries(base())
    .filter(([, v]) => typeof v === "string")
    .map(([k]) => k);

  // Malformed JSON
  const text = baseText();
  for (let i = 0; i < 3; i++) add("truncated-json", text.slice(0, int(1, Math.max(1, text.length - 1))));
  add("truncated-json", "{");
  add("truncated-json", '{"a":');
  add("truncated-json", '{"a":"unterminated');
  add("bom-json", `\uFEFF${text}`);
  add("bom-json", concat(new Uint8Array([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf]), text));
  for (const bad of INVALID_UTF8) add("invalid-utf8", concat(bad, text));
  const target = stringFields.length > 0 ? pick(stringFields) : "x";
  add("invalid-utf8", concat(withRaw(base(), target, '"').slice(0, -1), INVALID_UTF8[0] as Uint8Array, '"}'));
  add("invalid-utf8", concat('{"x":"', INVALID_UTF8[2] as Uint8Array, '"}'));
  add("deep-nesting", deepArray(10_000));
  add("deep-nesting", deepObject(10_000));
  for (const f of fields.length > 0 ? fields : ["x"]) {
    add("deep-nesting", withRaw(base(), f, deepArray(10_000)));
    add("deep-nesting", withRaw(base(), f, deepObject(10_000)));
  }
  for (const f of fields.length > 0 ? fields : ["x"]) for (const raw of RAW_VALUES) add("huge-numbers/surrogates", withRaw(base(), f, raw));
  add("lone-surrogate", `{"\\ud800":"\\udc00\\ud800"}`);
  add("lone-surrogate", JSON.stringify({ ...base(), "k\ud800": "v\udfff" }));
  for (const key of PROTO_KEYS) {
    add("prototype-keys", protoEverywhere(base(), key));
    add("prototype-keys", `{${JSON.stringify(key)}:${protoValue(key)}}`);
    for (const f of fields) add("prototype-keys", withRaw(base(), f, protoEverywhere({ nested: {} }, key)));
  }
  add("prototype-keys", protoEverywhere(base(), "__proto__").replace(/"__proto__"/g, '"\\u005f_proto__"'));
  for (const f of fields) for (const w of WRONG_TYPES) add("wrong-type", JSON.stringify({ ...base(), [f]: w }));
  for (const whole of ["", "[]", "null", "0", '"str"', "true", "{}", "[{}]", " ", "\n\t"]) add("empty/odd-top", whole);
  add("oversized", `{"x":"${"A".repeat(MAX_BODY)}"}`);
  add("oversized", concat(enc.encode(text.slice(0, -1)), `,"pad":"${"é".repeat(Math.ceil(MAX_BODY / 2) + 8)}"}`));
  for (const f of stringFields) {
    add("long-string", JSON.stringify({ ...base(), [f]: LONG(100_001) }));
    add("long-string", JSON.stringify({ ...base(), [f]: LONG(MAX_BODY - text.length - 64) }));
    for (const s of BIDI) add("bidi/zero-width", JSON.stringify({ ...base(), [f]: s }));
    for (const s of CONTROL) add("control-chars", JSON.stringify({ ...base(), [f]: s }));
  }
  for (const f of fields.length > 0 ? fields : ["x"]) {
    add("duplicate-keys", `${text.slice(0, -1)}${text.length > 2 ? "," : ""}${JSON.stringify(f)}:${JSON.stringify(pick(WRONG_TYPES))}}`);
    add("duplicate-keys", `{${JSON.stringify(f)}:null,${text.slice(1)}`);
  }
  add("unknown-field", JSON.stringify({ ...base(), "\u202Eevil": 1, "": "", "a.b": "c" }));
  // Content types
  for (const ct of [
    "text/plain",
    "multipart/form-data; boundary=xyz",
    null,
    "application/x-www-form-urlencoded",
    "application/json; charset=utf-16",
    "application/json, text/plain",
    "application/jsonx",
    "application/evil+json",
    "\u007f/\u0001",
    "",
  ])
    add(
      "content-type",
      ct?.startsWith("multipart") ? `--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\n${text}\r\n--xyz--\r\n` : text,
      { contentType: ct },
    );
  // Odd headers
  const odd: Record<string, string>[] = [
    { "X-Request-Id": "req\r\nX-Injected: 1" },
    { "X-Request-Id": LONG(10_000) },
    { "X-Request-Id": '\u007f\u0001\tid;"<x>' },
    { "X-Request-Id": "" },
    { "X-Request-Id": "../../etc/passwd" },
    { "Idempotency-Key": "" },
    { "Idempotency-Key": LONG(10_000) },
    { "Idempotency-Key": "\u007f\u0002 \t key\"'" },
    { "Idempotency-Key": "a, b, c" },
    { "Last-Event-ID": "-1" },
    { "Last-Event-ID": "99999999999999999999999999" },
    { "Last-Event-ID": "\u007f garbage \t\u0001" },
    { "Last-Event-ID": LONG(10_000) },
    { "X-Huge": LONG(256 * 1024) },
    { "Content-Length": "1" },
    { "If-Match": LONG(5000) },
    { "If-Match": '"-1"' },
    { Cookie: `a=${LONG(8000)}` },
  ];
  for (const h of odd) add("odd-headers", text, { headers: h });
  // Hostile path parameters
  for (const p of op.params) {
    for (const v of [
      "",
      "%E0%A4%A",
      "%",
      "%00",
      "..%2F..%2Fadmin",
      encodeURIComponent("\u202Eses_x"),
      encodeURIComponent("x\u200B"),
      LONG(5000),
      "%F0%9F%92%A9",
      encodeURIComponent("__proto__"),
      encodeURIComponent("constructor"),
      encodeURIComponent("a\r\nb"),
    ])
      add("path-param", text, { path: concretePath(op, { [p]: v }) });
  }
  // Credentials
  const wrongScope = op.auth === "admin" ? ALICE : ADMIN;
  for (const cred of [
    "none",
    { authorization: "" },
    { authorization: "Bearer" },
    { authorization: "Bearer " },
    { authorization: `Bearer ${wrongScope}` },
    { authorization: "Bearer garbage-token-garbage-token" },
    { authorization: `Bearer ${LONG(64 * 1024)}` },
    { authorization: "Basic dXNlcjpwYXNzd29yZA==" },
    { authorization: `Bearer ${ADMIN} ${ALICE}` },
    { authorization: "Bearer \u007f\u0001" },
    { authorization: `bearer ${ADMIN}x` },
    { authorization: "Bearer ===" },
  ] as Cred[])
    add("credentials", text, { cred });
  add("credentials", text, { path: `${concretePath(op)}?access_token=${op.auth === "admin" ? ADMIN : ALICE}` });
  if (op.auth === "signature") {
    for (const cred of ["bad-signature", "no-signature", "stale-signature"] as Cred[]) {
      add("signature", text, { cred });
      add("signature", protoEverywhere(base(), "__proto__"), { cred });
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Sending

const dec = new TextDecoder(); // replaces invalid bytes, as the gateway's c.req.text() does

async function hmacHex(secret: string, content: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return [...new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(content)))]
    .map((b) => b.toString(16).padStart(2, "0"))
    .join("");
}

/** The credential headers of a case. */
async function credentialHeaders(c: Case): Promise<Record<string, string>> {
  if (c.cred === "none") return {};
  if (typeof c.cred === "object") return { Authorization: c.cred.authorization };
  const auth = c.op.auth;
  if (auth === "admin") return { Authorization: `Bearer ${ADMIN}` };
  if (auth === "api") return { Authorization: `Bearer ${ALICE}` };
  if (auth === "sandbox") return { Authorization: `Bearer ${sandboxToken}` };
  if (auth !== "signature") return {};
  const raw = c.body === null ? "" : typeof c.body === "string" ? c.body : dec.decode(c.body);
  const now = Math.floor(Date.now() / 1000);
  const at = c.cred === "stale-signature" ? now - 3600 : now;
  if (c.op.path.startsWith("/webhooks/telegram/")) {
    if (c.cred === "no-signature") return {};
    return { "X-Telegram-Bot-Api-Secret-Token": c.cred === "right" ? (env.TELEGRAM_WEBHOOK_SECRET as string) : "wrong-secret" };
  }
  if (c.op.path.startsWith("/webhooks/slack/")) {
    if (c.cred === "no-signature") return {};
    const sig = await hmacHex(env.SLACK_SIGNING_SECRET as string, `v0:${at}:${raw}`);
    return {
      "X-Slack-Request-Timestamp": String(at),
      "X-Slack-Signature": `v0=${c.cred === "bad-signature" ? sig.replace(/^./, "f0") : sig}`,
    };
  }
  if (c.op.path.startsWith("/webhooks/standard/")) {
    const id = `msg_${label()}`;
    if (c.cred === "no-signature") return { "webhook-id": id };
    const sig = await signWebhook(webhookKey(env.STANDARD_WEBHOOK_SECRET) as Uint8Array, id, at, raw);
    return {
      "webhook-id": id,
      "webhook-timestamp": String(at),
      "webhook-signature": c.cred === "bad-signature" ? `v1,${btoa("x".repeat(32))}` : sig,
    };
  }
  return {};
}

interface Outcome {
  c: Case;
  status: number;
  text: string;
  problem?: string;
}

const STACK =
  /\n\s*at\s|\bat\s+\S+\s+\(|\w+\.(ts|js|mjs)\b|\/src\/|node_modules|file:\/\/|\b(TypeError|SyntaxError|RangeError|ReferenceError|URIError|EvalError|AggregateError)\b|\bundefined is not|Cannot read prop|Maximum call stack|Unexpected token|JSON at position|\bworkerd\b|\bD1_ERROR\b|SQLITE_|DurableObject/i;
const ENVELOPE_KEYS = new Set(["code", "message", "retry_after_seconds", "issues"]);
/** OpenAI's error object, on the OpenAI-compatible paths (docs/openai.md): exactly these, `code` the gateway's. */
const OPENAI_KEYS = ["code", "message", "type"];
const OPENAI_TYPES = new Set([
  "invalid_request_error",
  "authentication_error",
  "permission_error",
  "not_found_error",
  "rate_limit_error",
  "insufficient_quota",
  "server_error",
]);

/** What is wrong with an answer, or undefined. */
function judge(c: Case, status: number, text: string, contentType: string | null): string | undefined {
  if (status >= 500) {
    let code: string | undefined;
    try {
      code = JSON.parse(text)?.error?.code;
    } catch {}
    const documented = status === 503 && c.op.documents503 && (code === "secrets.unavailable" || code === "sandbox.unavailable");
    if (!documented) return `status ${status}`;
  }
  if (status < 400) return undefined;
  if (!/^application\/json/i.test(contentType ?? "")) return `error answer with Content-Type ${contentType}`;
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    return "error answer is not JSON";
  }
  if (body === null || typeof body !== "object" || Array.isArray(body)) return "error answer is not an object";
  if (Object.keys(body).join() !== "error") return `envelope has keys ${Object.keys(body).join()}`;
  const e = body.error;
  if (e === null || typeof e !== "object") return "error is not an object";
  if (typeof e.code !== "string" || !Object.hasOwn(ERROR_CODES, e.code)) return `unknown code ${String(e.code)}`;
  if (typeof e.message !== "string" || e.message.length === 0) return "message is not a string";
  if (isOpenAiPath(c.op.path)) {
    if (Object.keys(e).sort().join() !== OPENAI_KEYS.join()) return `OpenAI error with keys ${Object.keys(e).sort().join()}`;
    if (!OPENAI_TYPES.has(e.type)) return `unknown OpenAI error type ${String(e.type)}`;
  } else for (const k of Object.keys(e)) if (!ENVELOPE_KEYS.has(k)) return `unexpected envelope field ${k}`;
  if (e.issues !== undefined && !(c.op.path === "/api/admin/config" && status === 400)) return "issues outside POST /api/admin/config 400";
  if (
    e.issues !== undefined &&
    !(Array.isArray(e.issues) && e.issues.every((i: any) => typeof i?.path === "string" && typeof i?.message === "string"))
  )
    return "malformed issues";
  const leak = STACK.exec(e.message) ?? (e.issues ?? []).map((i: any) => STACK.exec(`${i.path} ${i.message}`)).find(Boolean);
  if (leak) return `internal detail in message: ${JSON.stringify(e.message.slice(0, 200))}`;
  return undefined;
}

const refusedByRuntime: { family: string; reason: string }[] = [];

async function send(c: Case): Promise<Outcome | undefined> {
  const headers = new Headers();
  try {
    for (const [k, v] of Object.entries({ ...(await credentialHeaders(c)), ...c.headers })) headers.set(k, v);
    if (c.contentType !== null) headers.set("Content-Type", c.contentType);
  } catch (err) {
    // The Fetch API refuses CR/LF/NUL and non-Latin-1 in header values before anything is sent.
    refusedByRuntime.push({ family: c.family, reason: (err as Error).message });
    return undefined;
  }
  const method = c.op.method.toUpperCase();
  const res = await app.request(`${BASE}${c.path}`, { method, headers, body: c.body }, env);
  const text = await res.text();
  return { c, status: res.status, text, problem: judge(c, res.status, text, res.headers.get("Content-Type")) };
}

async function pool<T, R>(items: T[], n: number, fn: (t: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i] as T);
      }
    }),
  );
  return out;
}

// ---------------------------------------------------------------------------------------------------------------

const PROTOTYPES: [string, object][] = [
  ["Object", Object.prototype],
  ["Array", Array.prototype],
  ["Function", Function.prototype],
  ["String", String.prototype],
];
const snapshot = () => PROTOTYPES.map(([n, p]) => `${n}:${Object.getOwnPropertyNames(p).sort().join(",")}`);

let doc: any;

beforeAll(async () => {
  const key = `agent:main:http:fuzz-${label()}:dm:u1`;
  const stub = env.SESSIONS.getByName(key) as DurableObjectStub<SessionDO>;
  const r = await stub.enqueueMessage(
    { sessionKey: key, agentId: "main" },
    { message: "hello", source: "http", limits: { maxTurns: 500, maxBytes: 2_000_000 } },
  );
  sessionId = r.sessionId;
  const minted = await call(app, "POST", `/api/admin/sessions/${sessionId}/sandbox-token`, {}, ADMIN);
  if (minted.status !== 201) throw new Error(`mint answered ${minted.status}: ${minted.text}`);
  sandboxToken = minted.body.token;
  const res = await app.request(`${BASE}/openapi.json`, {}, env);
  doc = await res.json();
});

describe("fuzz: hostile input on every POST/PUT/DELETE route of /openapi.json", () => {
  it("answers every request below 500 with an S3 envelope and no internals, stays healthy, pollutes nothing", {
    timeout: 600_000,
  }, async () => {
    const before = snapshot();
    const ops = operations(doc);
    expect(ops.length).toBeGreaterThan(10);
    const cases = ops.flatMap((op) => casesFor(op, doc));
    const started = Date.now();
    const outcomes = (await pool(cases, CONCURRENCY, send)).filter((o): o is Outcome => o !== undefined);
    const elapsed = Date.now() - started;

    const perRoute = new Map<string, { sent: number; statuses: Record<number, number> }>();
    for (const o of outcomes) {
      const k = `${o.c.op.method.toUpperCase()} ${o.c.op.path} [${o.c.op.auth}]`;
      const row = perRoute.get(k) ?? { sent: 0, statuses: {} };
      row.sent++;
      row.statuses[o.status] = (row.statuses[o.status] ?? 0) + 1;
      perRoute.set(k, row);
    }
    const families: Record<string, number> = {};
    for (const o of outcomes) families[o.c.family] = (families[o.c.family] ?? 0) + 1;
    console.log(
      [
        `fuzz seed 0x${SEED.toString(16)}: ${outcomes.length} requests over ${ops.length} operations in ${elapsed} ms (${refusedByRuntime.length} more refused by the Fetch API before sending)`,
        ...[...perRoute].map(([k, v]) => `  ${String(v.sent).padStart(4)}  ${k}  ${JSON.stringify(v.statuses)}`),
        `  families: ${JSON.stringify(families)}`,
      ].join("\n"),
    );

    const problems = outcomes
      .filter((o) => o.problem)
      .map(
        (o) =>
          `${o.c.op.method.toUpperCase()} ${o.c.path.slice(0, 120)} [${o.c.family}] → ${o.status}: ${o.problem} ${o.text.slice(0, 300)}`,
      );
    expect(problems.slice(0, 25), `${problems.length} bad answers`).toEqual([]);
    expect(outcomes.length).toBeGreaterThanOrEqual(1000);
    for (const op of ops) expect(outcomes.filter((o) => o.c.op === op).length, `${op.method} ${op.path}`).toBeGreaterThanOrEqual(40);

    const health = await app.request(`${BASE}/healthz`, {}, env);
    expect(health.status).toBe(200);
    expect(({} as any).polluted).toBeUndefined();
    expect(({} as any).prototype).toBeUndefined();
    expect(([] as any).polluted).toBeUndefined();
    expect((Object as any).polluted).toBeUndefined();
    expect(typeof ({} as any).toString).toBe("function");
    expect(snapshot()).toEqual(before);

    // Accepted hostile messages queued runs (on the mock provider): let them finish inside the test. The D1 run index
    // hears of a run when it ends, or when it has run for RUNNING_INDEX_DELAY_MS: so wait until nothing is queued
    // or running there AND the index has not changed for longer than that delay (no run is still under way).
    let last = "";
    let stableSince = Date.now();
    await until(async () => {
      const row = await env.DB.prepare(
        "SELECT COUNT(*) AS n, SUM(status IN ('queued', 'running')) AS busy, MAX(updated_at) AS at FROM runs",
      ).first<{ n: number; busy: number | null; at: string | null }>();
      const now = `${row?.n}:${row?.at}`;
      if (now !== last || (row?.busy ?? 0) > 0) {
        last = now;
        stableSince = Date.now();
        return false;
      }
      return Date.now() - stableSince > RUNNING_INDEX_DELAY_MS * 2.5;
    }, 60_000);
  });
});

/** Regression tests, one per finding of the fuzzer (docs/reliability.md "Hostile input (fuzz)"). */
describe("fuzz findings", () => {
  const deep = `${'{"a":'.repeat(10_000)}1${"}".repeat(10_000)}`;
  const post = (path: string, body: string, token: string, contentType = "application/json") =>
    app.request(
      `${BASE}${path}`,
      { method: "POST", headers: { Authorization: `Bearer ${token}`, "Content-Type": contentType }, body },
      env,
    );

  it("415-as-500: an optional JSON body sent as text/plain is 400 invalid.request, not a 500", async () => {
    for (const ct of ["text/plain", "multipart/form-data; boundary=xyz", "application/x-www-form-urlencoded"]) {
      const res = await post(`/api/admin/sessions/${sessionId}/sandbox-token`, '{"ttl_seconds":600}', ADMIN, ct);
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error: { code: "invalid.request", message: "Content-Type must be application/json" } });
    }
  });

  it("deep-config-stack-overflow: a config nested 10,000 levels deep is 400, not a 500 from the secrets guard", async () => {
    for (const body of [deep, `{"agents":${deep}}`, `{"http":${"[".repeat(10_000)}${"]".repeat(10_000)}}`]) {
      const res = await post("/api/admin/config", body, ADMIN);
      expect(res.status).toBe(400);
      expect(((await res.json()) as any).error).toEqual({ code: "invalid.request", message: "json: nested deeper than 64 levels" });
    }
  });

  it("deep-args-stack-overflow: tool-callback args nested 10,000 levels deep are 400, not a 500 from Durable Object RPC", async () => {
    for (const prefix of ["/v1/sessions", "/proliferate"]) {
      const res = await post(`${prefix}/${sessionId}/tools/verify`, `{"tool_call_id":"tc_deep","args":${deep}}`, sandboxToken);
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error: { code: "invalid.request", message: "args: nested deeper than 64 levels" } });
    }
    // Ordinary nesting still reaches the tool.
    const nested = `${'{"a":'.repeat(30)}1${"}".repeat(30)}`;
    const ok = await post(`/v1/sessions/${sessionId}/tools/verify`, `{"tool_call_id":"tc_nested_ok","args":${nested}}`, sandboxToken);
    expect(ok.status).toBe(200);
  });
});

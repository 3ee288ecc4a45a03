/**
 * The `Idempotency-Key` request header (draft-ietf-httpapi-idempotency-key-header;
 * DESIGN "Idempotency") for `POST /v1/runs`, `POST /v1/chat/messages` and
 * `POST /v1/chat/completions`.
 *
 * - No header: nothing changes.
 * - The key is 1–255 visible ASCII characters, sent bare or as a structured-field
 *   string (`"…"`, as the draft writes it); anything else is 400 naming the header.
 * - Keys are scoped per caller (one `IdempotencyDO` each, `api:<callerId>`), per route and, for an API key
 *   record, per key (issue 33, D-087): two keys of one caller never answer each other's requests. The request
 *   is identified by the SHA-256 of method, path and raw body.
 * - The route's own auth refusals (`ReplayGuard`: an agent the key may not use, a setup session the caller may
 *   not start) run before the key is looked up, so no stored answer, 409 or 422 reaches a request the route would
 *   refuse now — a key narrowed after its answer was stored included.
 * - First use: the key is recorded in flight, the route runs, and its answer
 *   (status, body, content type, `Preference-Applied`) is stored for
 *   `http.idempotency.retentionSeconds`. A repeat with the same body replays it
 *   (header `Idempotent-Replayed: true`); a repeat while the first is in flight is
 *   `409 conflict`; the same key with a different body is `422 idempotency.mismatch`.
 * - Not stored: 5xx answers, errors that escape the error funnel, 429 refusals
 *   (nothing was done and `Retry-After` says when to come back), and event streams
 *   (`POST /v1/chat/completions` with `stream: true`). The key is released so the
 *   client can retry.
 * - A Worker that dies mid-request leaves the key in flight; after a minute the next
 *   repeat takes it over. Routes derive their run's dispatch key from the attempt
 *   token set here (`c.get("idempotency")`), so every re-attempt of one use of a key
 *   lands on the same run.
 */
import { z } from "@hono/zod-openapi";
import type { Context, MiddlewareHandler } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { GatewayError } from "../../errors";
import { requestHash } from "../../idempotency/store";
import { redactText, secretValuesFromEnv } from "../../security/redact";
import { type AppEnv, ErrorEnvelopeSchema } from "../router";

export const IDEMPOTENCY_KEY_HEADER = "Idempotency-Key";
export const IDEMPOTENT_REPLAYED_HEADER = "Idempotent-Replayed";

/** For the routes' OpenAPI `request.headers` (the middleware does the checking, so the schema stays loose). */
export const IdempotencyKeyHeader = z.string().optional().openapi({
  description: "1-255 visible ASCII characters (bare or as a quoted string); makes the request safe to repeat",
  example: "8e03978e-40d5-43e8-bc93-6894a57f9324",
});

/** For the routes' OpenAPI descriptions. */
export const IDEMPOTENCY_DESCRIPTION =
  "With `Idempotency-Key` a repeat of the same request (same body) replays the stored answer with header " +
  "`Idempotent-Replayed: true`; 409 while the first is still in flight, 422 `idempotency.mismatch` for a different body. " +
  "Keys are the caller's own (an API key record's own) and are kept `http.idempotency.retentionSeconds` (default one day); " +
  "5xx and 429 answers are not kept. A request the route refuses (403) is refused before any stored answer is replayed.";

/** For the routes' OpenAPI responses, with the route's error schema (the S3 envelope, or OpenAI's on its routes). */
export function idempotencyErrorsIn<S extends z.ZodType>(schema: S) {
  return {
    409: { description: "A request with this Idempotency-Key is still in flight", content: { "application/json": { schema } } },
    422: { description: "This Idempotency-Key was used for a different request", content: { "application/json": { schema } } },
  } as const;
}

export const idempotencyErrors = idempotencyErrorsIn(ErrorEnvelopeSchema);

/** What a route needs to make its effect idempotent under the key. */
export interface IdempotencyContext {
  /** The key as the client sent it (unquoted). */
  key: string;
  /** The caller the key belongs to. */
  callerId: string;
  /** The token of this use of the key: the same for every re-attempt, new once the key has expired (32 hex). */
  attempt: string;
  /** For SessionDO `enqueueMessage`: a re-attempt returns the run the first one queued. */
  dispatchKey: string;
}

declare module "hono" {
  interface ContextVariableMap {
    /** Set by `idempotencyKey()`: the request's `Idempotency-Key`, or undefined when it has none. */
    idempotency: IdempotencyContext | undefined;
  }
}

const VISIBLE_ASCII = /^[\x21-\x7e]{1,255}$/;
/** RFC 8941 sf-string: printable ASCII in double quotes, `\"` and `\\` escaped. */
const SF_STRING = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/;

/** The key named by a header value, or null when the value is not a valid key. A value that opens a quote must be a whole sf-string. */
export function parseIdempotencyKey(value: string): string | null {
  if (!value.startsWith('"')) return VISIBLE_ASCII.test(value) ? value : null;
  const quoted = SF_STRING.exec(value);
  const key = quoted ? (quoted[1] as string).replace(/\\(["\\])/g, "$1") : "";
  return VISIBLE_ASCII.test(key) ? key : null;
}

/** What identifies a request under its key: SHA-256 of method, path and the raw body text. */
export function idempotencyFingerprint(method: string, path: string, body: string): Promise<string> {
  return requestHash(`${method.toUpperCase()} ${path}\n${body}`);
}

/**
 * The store scope of a route's keys: per route, and per API key record when the request came with one (`keyId`), so
 * a caller's keys share no answers. Env-token callers keep the scope they always had.
 */
export function idempotencyScope(method: string, path: string, keyId?: string): string {
  const route = `${method.toUpperCase()} ${path}`;
  return keyId === undefined ? `http:${route}` : `http:key:${keyId}:${route}`;
}

/**
 * A route's auth refusals for a request body, thrown as its GatewayError; the middleware runs it before any stored
 * answer is looked up. `body` is the parsed JSON, or undefined when it is not JSON (the route's validator answers
 * that). It refuses only what the route itself refuses for the same principal and body (where the route would first
 * answer a 400 or 404 for that body, the guard may answer its 403 first).
 */
export type ReplayGuard = (c: Context<AppEnv>, body: unknown) => void;

/** A field of a parsed body that may be anything (a guard sees the body before the route's validator does). */
export function bodyField(body: unknown, name: string): unknown {
  return body !== null && typeof body === "object" && Object.hasOwn(body, name) ? (body as Record<string, unknown>)[name] : undefined;
}

/** The request's JSON body, or undefined when it is not JSON. */
function parsedBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The name of the caller's IdempotencyDO. */
export function idempotencyObjectName(callerId: string): string {
  return `api:${callerId}`;
}

/** The dispatch key of one use of an idempotency key (the attempt token is fixed-length, so this is unambiguous). */
export function idempotencyDispatchKey(callerId: string, attempt: string, key: string): string {
  return `idem:${callerId}:${attempt}:${key}`;
}

/** A stored answer. */
interface StoredResponse {
  status: number;
  content_type: string | null;
  preference_applied: string | null;
  body: string;
}

/** The stored answer again, through the context so the app's own headers (X-Request-Id) are on it too. */
function replay(c: Context<AppEnv>, text: string): Response {
  const stored = JSON.parse(text) as StoredResponse;
  const headers: Record<string, string> = { [IDEMPOTENT_REPLAYED_HEADER]: "true" };
  if (stored.content_type) headers["Content-Type"] = stored.content_type;
  if (stored.preference_applied) headers["Preference-Applied"] = stored.preference_applied;
  return c.body(stored.body, stored.status as ContentfulStatusCode, headers);
}

/** Whether an answer is kept for replay: 5xx (the request may not have been processed) and 429 (refused, retry later) are not. */
const storable = (status: number) => status < 500 && status !== 429;

/** The middleware; put it after authentication and `requireJsonBody`, before the route's validators. */
export function idempotencyKey(guard?: ReplayGuard): MiddlewareHandler<AppEnv> {
  return async function idempotencyKey(c, next) {
    const header = c.req.header(IDEMPOTENCY_KEY_HEADER);
    if (header === undefined) {
      c.set("idempotency", undefined);
      return next();
    }
    const key = parseIdempotencyKey(header);
    if (key === null) {
      throw new GatewayError(
        "invalid.request",
        `${IDEMPOTENCY_KEY_HEADER} must be 1-255 visible ASCII characters (bare or as a quoted string)`,
      );
    }
    const principal = c.get("principal");
    const callerId = principal?.scope === "api" ? principal.callerId : "admin";
    const text = await c.req.text();
    guard?.(c, parsedBody(text)); // before the store: a refused request never sees a stored answer
    const stub = c.env.IDEMPOTENCY.getByName(idempotencyObjectName(callerId));
    const scope = idempotencyScope(c.req.method, c.req.path, principal?.scope === "api" ? principal.key?.keyId : undefined);
    const hash = await idempotencyFingerprint(c.req.method, c.req.path, text);
    const retentionMs = c.get("config").http.idempotency.retentionSeconds * 1000;

    const begun = await stub.begin(scope, key, hash, Date.now(), retentionMs);
    if (begun.kind === "replay") return replay(c, begun.response);
    if (begun.kind === "in_flight") {
      throw new GatewayError("conflict", `a request with this ${IDEMPOTENCY_KEY_HEADER} is still being processed; retry later`);
    }
    if (begun.kind === "mismatch") {
      throw new GatewayError("idempotency.mismatch", `this ${IDEMPOTENCY_KEY_HEADER} was already used for a different request`);
    }

    c.set("idempotency", { key, callerId, attempt: begun.attempt, dispatchKey: idempotencyDispatchKey(callerId, begun.attempt, key) });
    try {
      await next();
    } catch (err) {
      // Not even the error funnel answered: release the key and let the error go on.
      await release(c, () => stub.abandon(scope, key));
      throw err;
    }
    const res = c.res;
    // A stream is not kept: storing it would mean holding the whole answer back until it ends. Its key is released.
    if (!storable(res.status) || res.headers.get("Content-Type")?.startsWith("text/event-stream")) {
      await release(c, () => stub.abandon(scope, key));
      return;
    }
    const stored: StoredResponse = {
      status: res.status,
      content_type: res.headers.get("Content-Type"),
      preference_applied: res.headers.get("Preference-Applied"),
      body: redactText(await res.clone().text(), secretValuesFromEnv(c.env)),
    };
    await release(c, () => stub.complete(scope, key, JSON.stringify(stored), Date.now(), retentionMs));
  };
}

/**
 * Writes the outcome of a request under its key. A failure here must not cost the caller its
 * answer: the key then stays in flight, and the next repeat takes it over after a minute.
 */
async function release(c: Context<AppEnv>, write: () => Promise<void>): Promise<void> {
  try {
    await write();
  } catch (err) {
    c.get("logger")?.log("warn", "http.error", {
      request_id: c.get("requestId") ?? "",
      code: "internal.error",
      status: c.res.status,
      error_name: err instanceof Error ? err.name : typeof err,
    });
  }
}

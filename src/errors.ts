/**
 * The one error type of the gateway and its wire envelope.
 *
 * Every failure that reaches a caller is a `GatewayError` turned into
 * `{"error":{"code","message"}}` (S3 §5) by the app's single error funnel.
 * The public message is written for the caller; `internal` carries detail for
 * the log only and never leaves the Worker. A Zod validation failure at any door (a route, the OpenAI body, a
 * WebSocket frame) becomes `invalid.request` naming the first offending field through `invalidRequestFromZod`.
 */
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { ZodError } from "zod";
import { formatPath } from "./config/issues";

/** Wire codes: S3's canonical tool/HTTP codes plus the gateway's own (DESIGN §3). */
export const ERROR_CODES = {
  "invalid.request": 400,
  "tool.not_found": 404,
  "tool.input_invalid": 400,
  "policy.denied": 403,
  "sandbox.required": 403,
  "sandbox.unavailable": 503,
  timeout: 504,
  "internal.error": 500,
  "auth.unauthorized": 401,
  "auth.forbidden": 403,
  "resource.not_found": 404,
  conflict: 409,
  gone: 410,
  "idempotency.mismatch": 422,
  "payload.too_large": 413,
  "rate.limited": 429,
  over_budget: 429,
  "provider.unavailable": 502,
  "secrets.unavailable": 503,
  "signing.unavailable": 503,
  REFUSE_SYSTEM_PROMPT: 403,
} as const satisfies Record<string, ContentfulStatusCode>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The S3 error envelope as it goes on the wire. */
export interface ErrorEnvelope {
  error: { code: ErrorCode; message: string; retry_after_seconds?: number; issues?: ErrorIssue[] };
}

/** One thing wrong with a submitted document (a posted config): where, and what. */
export interface ErrorIssue {
  path: string;
  message: string;
}

export interface GatewayErrorOptions {
  /** Overrides the code's default HTTP status (e.g. 503 for a provider that failed strict validation). */
  status?: ContentfulStatusCode;
  /** Detail for the log only; never sent to a caller. */
  internal?: string;
  /** For `rate.limited` / `over_budget`: seconds until a retry can succeed. */
  retryAfterSeconds?: number;
  /** Extra response headers (e.g. `WWW-Authenticate`). */
  headers?: Record<string, string>;
  /** Every problem found, for a form to show inline (a posted config); the message names the first. */
  issues?: ErrorIssue[];
}

/** An error with a public code and message, safe to show to any caller. */
export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: ContentfulStatusCode;
  readonly internal: string | undefined;
  readonly retryAfterSeconds: number | undefined;
  readonly headers: Record<string, string>;
  readonly issues: ErrorIssue[] | undefined;

  constructor(code: ErrorCode, message: string, options: GatewayErrorOptions = {}) {
    super(message);
    this.name = "GatewayError";
    this.code = code;
    this.status = options.status ?? ERROR_CODES[code];
    this.internal = options.internal;
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.headers = options.headers ?? {};
    this.issues = options.issues;
  }

  /** The wire envelope for this error. */
  toEnvelope(): ErrorEnvelope {
    const error: ErrorEnvelope["error"] = { code: this.code, message: this.message };
    if (this.retryAfterSeconds !== undefined) error.retry_after_seconds = this.retryAfterSeconds;
    if (this.issues !== undefined) error.issues = this.issues;
    return { error };
  }
}

/** The value at `path` inside `input`, or undefined when any step is missing. */
function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = input;
  for (const key of path) {
    if (v === null || typeof v !== "object" || !Object.hasOwn(v, key)) return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

/**
 * Turns a Zod failure on a request into `invalid.request` naming the first offending field.
 * With the `input` that failed, a missing field is "required" whatever its type (Zod reports a
 * missing enum as an invalid option, not as undefined).
 */
export function invalidRequestFromZod(error: ZodError, target: string, input?: unknown): GatewayError {
  const issue = error.issues[0];
  if (!issue) return new GatewayError("invalid.request", `invalid ${target}`);
  const field = issue.path.length > 0 ? formatPath(issue.path) : target;
  if (issue.code === "unrecognized_keys") {
    return new GatewayError("invalid.request", `unknown field ${formatPath([...issue.path, issue.keys[0] ?? ""])}`);
  }
  const missing =
    (issue.code === "invalid_type" && /received undefined$/.test(issue.message)) ||
    (input !== undefined && issue.code !== "custom" && issue.path.length > 0 && valueAt(input, issue.path) === undefined);
  if (missing) {
    return new GatewayError("invalid.request", `${field} is required`);
  }
  return new GatewayError("invalid.request", `${field}: ${issue.message}`);
}

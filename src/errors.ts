/**
 * The one error type of the gateway and its wire envelope.
 *
 * Every failure that reaches a caller is a `GatewayError` turned into
 * `{"error":{"code","message"}}` (S3 §5) by the app's single error funnel.
 * The public message is written for the caller; `internal` carries detail for
 * the log only and never leaves the Worker.
 */
import type { ContentfulStatusCode } from "hono/utils/http-status";

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

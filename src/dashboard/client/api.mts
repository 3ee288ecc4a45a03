/**
 * The one way the browser code talks to the gateway: `fetch` to a same-origin path built from ADMIN_API/DOCS_API
 * templates, with the token only in `Authorization: Bearer`. No cookies are sent (`credentials: "omit"`) and the
 * gateway reads none, so another site cannot make a signed-in browser act (no ambient credential → no CSRF); the
 * CSP's connect-src 'self' keeps every request on this origin.
 */
import type { ApiRoute } from "../api-routes.ts";

/** A failed call: the HTTP status (0 when the gateway was not reached) and the S3 envelope's code and message. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly body: unknown;

  constructor(status: number, code: string, message: string, body: unknown) {
    super(message);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/** A successful answer: JSON bodies parsed, anything else (JSONL) as text. */
export interface ApiResult<T> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface CallOptions {
  params?: Record<string, string>;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  /** A token to try instead of the stored one (sign-in checks a token before keeping it). */
  token?: string;
}

/** Fills each `{name}` of an OpenAPI path template, percent-encoded; a missing value is an error, not "undefined". */
export function fillPath(template: string, params: Record<string, string> = {}): string {
  return template.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const value = params[name];
    if (value === undefined) throw new Error(`${template}: no value for {${name}}`);
    return encodeURIComponent(value);
  });
}

/** A query string of the defined values, or "". */
export function queryString(query: Record<string, string | number | undefined> = {}): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** The S3 envelope's message of a parsed error body, if it has one. */
function envelope(body: unknown): { code: string; message: string } | null {
  const error = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
  return error && typeof error.message === "string" ? { code: String(error.code ?? ""), message: error.message } : null;
}

/** Parses a body as JSON when it says it is JSON. */
function parseBody(res: Response, text: string): unknown {
  if (!/^application\/([\w.-]+\+)?json\b/i.test(res.headers.get("Content-Type") ?? "")) return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

export type Caller = <T>(route: ApiRoute, options?: CallOptions) => Promise<ApiResult<T>>;

/**
 * A caller that sends `token()` as the bearer token; a 401 (token refused, or none) calls `onUnauthorized` so the
 * page can go back to sign-in, then throws like every other failure.
 */
export function createCaller(token: () => string | null, onUnauthorized: (message: string) => void): Caller {
  return async function call<T>(route: ApiRoute, options: CallOptions = {}): Promise<ApiResult<T>> {
    const bearer = options.token ?? token();
    if (!bearer) {
      onUnauthorized("sign in first");
      throw new ApiError(401, "auth.unauthorized", "sign in first", null);
    }
    const url = fillPath(route.path, options.params) + queryString(options.query);
    const headers: Record<string, string> = { Accept: "application/json", ...options.headers, Authorization: `Bearer ${bearer}` };
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    let res: Response;
    try {
      res = await fetch(url, {
        method: route.method,
        headers,
        ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
        credentials: "omit",
        cache: "no-store",
        redirect: "error",
        referrerPolicy: "no-referrer",
      });
    } catch (err) {
      throw new ApiError(0, "network", `cannot reach the gateway (${(err as Error).message})`, null);
    }
    const text = await res.text();
    const body = parseBody(res, text);
    if (!res.ok) {
      const e = envelope(body);
      const message = e?.message ?? `HTTP ${res.status}`;
      if (res.status === 401 && options.token === undefined) onUnauthorized(message);
      throw new ApiError(res.status, e?.code ?? "", message, body);
    }
    return { status: res.status, headers: res.headers, body: body as T, text };
  };
}

/** The message to show for anything thrown. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A list answer's next page: `next_cursor` when it is a non-empty string; anything else (absent, null) means none. */
export function nextCursor(body: unknown): string | null {
  const c = (body as { next_cursor?: unknown } | null)?.next_cursor;
  return typeof c === "string" && c.length > 0 ? c : null;
}

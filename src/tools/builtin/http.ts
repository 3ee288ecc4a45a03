/**
 * S4 §4 `http.get {url, use_cache=true}`: fetches a public web page as text.
 *
 * Every hop runs the same steps in the same order, so nothing is read or
 * fetched for a target the policy refuses:
 *   1. URL check (`checkUrl`: scheme, userinfo, port, private/internal hosts);
 *   2. capability check (S4 §4: `net` or `net:<domain>`, with the global
 *      allowlist limiting `net`);
 *   3. cache lookup (D1 `http_cache`, only with `use_cache`) — after the
 *      policy, so a cached response is never served once a capability is
 *      revoked;
 *   4. `fetch` with `redirect: "manual"`: a redirect is followed by this loop
 *      (at most `maxRedirects`), and its target starts again at step 1.
 *
 * Limits: the body is read from the stream up to `maxBytes` and the rest is
 * cancelled (`truncated: true`, cut on a UTF-8 character boundary); the whole
 * call stops at `ctx.timeoutMs` or when `ctx.signal` aborts (`timeout`).
 * Bodies are returned as UTF-8 text; a non-text content type (images, PDFs,
 * archives, …) is refused with `tool.input_invalid` rather than returned as
 * base64, which a model cannot use and which would waste its context. A body
 * with no content type is accepted only if it decodes as UTF-8 without NULs.
 *
 * Only 200 responses are cached, under the URL of the hop that answered;
 * `use_cache: false` skips reading the cache but still refreshes it.
 */
import { z } from "zod";
import { type CapabilityDecision, capabilityDecision, checkUrl, MAX_URL_LENGTH, type UrlRefusal } from "../net-policy";
import { defineTool, type ToolContext, type ToolDefinition, type ToolOutcome } from "../registry";
import { ABORTED, readAtMost, untilAborted, utf8Boundary } from "./common";

export interface HttpGetOptions {
  /** Global network allowlist: with it, `net` covers only these domains (and their subdomains); null = no allowlist. */
  allowlist?: readonly string[] | null;
  /** How long a cached 200 response is served (default 300 s). */
  cacheTtlSeconds?: number;
  /** Most body bytes read from the network (default 1 MiB). */
  maxBytes?: number;
  /** Most redirects followed (default 5). */
  maxRedirects?: number;
}

export const HTTP_GET_DEFAULTS = { cacheTtlSeconds: 300, maxBytes: 1_048_576, maxRedirects: 5 } as const;

const HttpGetInput = z.strictObject({
  url: z.string().min(1).max(MAX_URL_LENGTH).describe("The http:// or https:// URL to fetch"),
  use_cache: z
    .boolean()
    .default(true)
    .describe("Serve a fresh cached copy if there is one; false always fetches (and refreshes the cache)"),
});

export interface HttpGetOutput {
  /** The requested URL, normalised (no fragment). */
  url: string;
  /** The URL that answered, after redirects. */
  final_url: string;
  status: number;
  content_type: string | null;
  body: string;
  truncated: boolean;
  cached: boolean;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

/** Media types returned as text besides `text/*`, `*+json` and `*+xml`. */
const TEXT_TYPES = new Set([
  "application/json",
  "application/xml",
  "application/javascript",
  "application/ecmascript",
  "application/x-javascript",
  "application/x-ndjson",
  "application/yaml",
  "application/x-yaml",
  "application/toml",
  "application/x-www-form-urlencoded",
  "application/graphql",
  "application/sql",
]);

/** An `http.get` tool with its own allowlist and limits; `httpGet` below is the gateway's default instance. */
export function createHttpGet(options: HttpGetOptions = {}): ToolDefinition {
  const allowlist = options.allowlist ?? null;
  const ttlMs = (options.cacheTtlSeconds ?? HTTP_GET_DEFAULTS.cacheTtlSeconds) * 1000;
  const maxBytes = options.maxBytes ?? HTTP_GET_DEFAULTS.maxBytes;
  const maxRedirects = options.maxRedirects ?? HTTP_GET_DEFAULTS.maxRedirects;
  const cacheMinutes = Math.round(ttlMs / 60_000);
  const cacheText = ttlMs > 0 ? `Responses are cached for ${cacheMinutes >= 1 ? `${cacheMinutes} min` : `${ttlMs / 1000} s`}` : "";

  return defineTool({
    name: "http.get",
    description: [
      `Fetch a public web page or text document (HTTP GET) and return its text, at most ${formatBytes(maxBytes)} (truncated says whether it was cut).`,
      `Needs the session capability "net" or "net:<domain>", which only an admin grants; without it the call is denied, and you may ask for access by adding the NOTES action request_permission:net:<domain>.`,
      `Only http/https on ports 80/443; private, loopback, link-local and cloud-metadata addresses and internal host names are always refused.`,
      `Redirects are followed (at most ${maxRedirects}), each checked the same way. Non-text responses (images, PDFs, archives) are refused.`,
      cacheText ? `${cacheText}; set use_cache to false to fetch a fresh copy.` : "",
    ]
      .filter(Boolean)
      .join(" "),
    input: HttpGetInput,
    risk: "read_only",
    handler: async (input, ctx) => {
      const signal = AbortSignal.any([ctx.signal, AbortSignal.timeout(ctx.timeoutMs)]);
      try {
        return await get(input.url, input.use_cache, ctx, signal);
      } catch (err) {
        if (signal.aborted) return timedOut(ctx);
        throw err;
      }
    },
  });

  async function get(raw: string, useCache: boolean, ctx: ToolContext, signal: AbortSignal): Promise<ToolOutcome> {
    const first = checkUrl(raw);
    if (!first.ok) return refusedUrl(first.reason, raw, null);
    const requested = first.url.href;
    let hop = first;
    for (let redirects = 0; ; redirects++) {
      const target = hop.url.href;
      // 2. Capabilities, before anything is read or fetched for this hop.
      // The gateway's configured allowlist (passed by the run) wins over the one this instance was built with.
      const decision = capabilityDecision(hop.host, ctx.capabilities, ctx.netAllowlist !== undefined ? ctx.netAllowlist : allowlist);
      if (!decision.allowed) return deniedCapability(decision, hop.host, redirects > 0 ? target : null);

      // 3. The cache, only after the policy allowed this hop.
      if (useCache) {
        const hit = await untilAborted(readCache(ctx.env.DB, target, Date.now()), signal);
        if (hit === ABORTED) return timedOut(ctx);
        if (hit) return answer({ ...hit, url: requested, final_url: target, cached: true });
      }

      // 4. The network; redirects come back to this loop.
      if (signal.aborted) return timedOut(ctx);
      let res: Response;
      try {
        res = await fetch(target, {
          method: "GET",
          redirect: "manual",
          signal,
          headers: { accept: "text/html, text/plain;q=0.9, application/json;q=0.9, */*;q=0.1", "user-agent": "sophie-gateway http.get" },
        });
      } catch {
        if (signal.aborted) return timedOut(ctx);
        return networkFailure(target);
      }

      const location = res.headers.get("location");
      if (REDIRECT_STATUSES.has(res.status) && location !== null) {
        res.body?.cancel().catch(() => {});
        if (redirects >= maxRedirects)
          return {
            ok: false,
            error: { code: "internal.error", message: `http.get stopped at ${target}: more than ${maxRedirects} redirects` },
          };
        let nextRaw: string;
        try {
          nextRaw = new URL(location, target).href;
        } catch {
          return refusedUrl("invalid_url", location, target);
        }
        // 1. The URL check, again for the redirect's target.
        const next = checkUrl(nextRaw);
        if (!next.ok) return refusedUrl(next.reason, nextRaw, target);
        hop = next;
        continue;
      }

      const contentType = res.headers.get("content-type");
      const mediaType = contentType?.split(";")[0]?.trim().toLowerCase() || null;
      if (mediaType !== null && !isTextType(mediaType)) {
        res.body?.cancel().catch(() => {});
        return notText(target, mediaType);
      }
      let head: Uint8Array;
      try {
        const read = res.body ? await readAtMost(res.body, maxBytes + 1, signal) : new Uint8Array(0);
        if (read === ABORTED) return timedOut(ctx);
        head = read;
      } catch {
        if (signal.aborted) return timedOut(ctx);
        return networkFailure(target);
      }
      const truncated = head.length > maxBytes;
      const bytes = truncated ? head.subarray(0, utf8Boundary(head, maxBytes)) : head;
      let body: string;
      if (mediaType === null) {
        // No declared type: text only if it is valid UTF-8 without NULs.
        try {
          body = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
        } catch {
          return notText(target, null);
        }
        if (body.includes("\u0000")) return notText(target, null);
      } else {
        body = new TextDecoder("utf-8").decode(bytes);
      }

      const output: HttpGetOutput = {
        url: requested,
        final_url: target,
        status: res.status,
        content_type: contentType,
        body,
        truncated,
        cached: false,
      };
      if (res.status === 200 && ttlMs > 0) await writeCache(ctx.env.DB, output, Date.now(), ttlMs);
      return answer(output);
    }
  }
}

/** The gateway's `http.get`: no global allowlist, responses cached for 5 minutes. */
export const httpGet = createHttpGet({ allowlist: null, cacheTtlSeconds: HTTP_GET_DEFAULTS.cacheTtlSeconds });

function answer(output: HttpGetOutput): ToolOutcome {
  const size = new TextEncoder().encode(output.body).length;
  const notes = [output.truncated ? "truncated" : "", output.cached ? "cached" : ""].filter(Boolean);
  return {
    ok: true,
    output,
    summary: `${output.status} from ${output.final_url}, ${size} bytes${notes.length ? ` (${notes.join(", ")})` : ""}`,
  };
}

function isTextType(mediaType: string): boolean {
  return mediaType.startsWith("text/") || TEXT_TYPES.has(mediaType) || mediaType.endsWith("+json") || mediaType.endsWith("+xml");
}

function notText(target: string, mediaType: string | null): ToolOutcome {
  const what = mediaType ? `answered with ${mediaType}` : "answered with a binary body and no content type";
  return { ok: false, error: { code: "tool.input_invalid", message: `http.get returns text only; ${target} ${what}` } };
}

const URL_REFUSALS: Record<UrlRefusal, string> = {
  invalid_url: "is not a valid URL",
  too_long: `is longer than ${MAX_URL_LENGTH} characters`,
  scheme: "is refused: http.get fetches only http:// and https:// URLs",
  userinfo: "is refused: URLs with a user name or password (user:pass@host) are never fetched",
  port: "is refused: http.get fetches only on the default ports 80 and 443",
  private_address: "is refused: private, loopback, link-local, cloud-metadata and other non-public addresses are never fetched",
  internal_hostname:
    "is refused: local and internal host names (localhost, *.local, *.internal, metadata, single-label names) are never fetched",
  wildcard_dns:
    "is refused: wildcard-DNS names that can resolve to private addresses (nip.io, sslip.io, localtest.me, lvh.me, …) and names that embed a private IPv4 address are never fetched",
  special_use_name:
    "is refused: special-use domain names (.test, .example, .invalid, .onion, .alt) reach no public host and are never fetched",
};

/**
 * A URL the policy refuses: `policy.denied`, except that the model's own malformed URL is `tool.input_invalid`.
 * `from` is the hop that redirected here (a refused redirect target is always `policy.denied`).
 */
function refusedUrl(reason: UrlRefusal, raw: string, from: string | null): ToolOutcome {
  const shown = raw.length > 200 ? `${raw.slice(0, 200)}…` : raw;
  if (from === null && (reason === "invalid_url" || reason === "too_long"))
    return { ok: false, error: { code: "tool.input_invalid", message: `url ${URL_REFUSALS[reason]}` } };
  const message = from === null ? `${shown} ${URL_REFUSALS[reason]}` : `redirect from ${from} to ${shown} ${URL_REFUSALS[reason]}`;
  return { ok: false, error: { code: "policy.denied", message } };
}

function deniedCapability(
  decision: Exclude<CapabilityDecision, { allowed: true }>,
  host: string,
  redirectedTo: string | null,
): ToolOutcome {
  const cap = `net:${host}`;
  const how = `ask an admin to grant it, or request it with the NOTES action request_permission:${cap}`;
  const core =
    decision.reason === "no_capability"
      ? `http.get needs the capability "net" or "${cap}" to fetch ${host}; ${how}`
      : `${host} is not on the gateway's network allowlist, so the capability "net" does not cover it; http.get needs the capability "${cap}"; ${how}`;
  const message = redirectedTo === null ? core : `redirect to ${redirectedTo} refused: ${core}`;
  return { ok: false, error: { code: "policy.denied", message } };
}

function networkFailure(target: string): ToolOutcome {
  return { ok: false, error: { code: "internal.error", message: `http.get could not reach ${target}`, retryable: true } };
}

function timedOut(ctx: ToolContext): ToolOutcome {
  return {
    ok: false,
    error: { code: "timeout", message: `http.get did not finish within ${ctx.timeoutMs} ms or was cancelled`, retryable: true },
  };
}

type CachedResponse = Pick<HttpGetOutput, "status" | "content_type" | "body" | "truncated">;

/** A fresh cached 200 for `url`; a cache that cannot be read is a miss. */
async function readCache(db: D1Database, url: string, now: number): Promise<CachedResponse | null> {
  try {
    const row = await db
      .prepare("SELECT status, content_type, body, truncated FROM http_cache WHERE url = ? AND expires_at > ?")
      .bind(url, now)
      .first<{ status: number; content_type: string | null; body: string; truncated: number }>();
    return row ? { status: row.status, content_type: row.content_type, body: row.body, truncated: row.truncated === 1 } : null;
  } catch {
    return null;
  }
}

/** Stores a 200 under the URL that answered and drops expired rows; a cache that cannot be written is skipped. */
async function writeCache(db: D1Database, output: HttpGetOutput, now: number, ttlMs: number): Promise<void> {
  try {
    await db.batch([
      db.prepare("DELETE FROM http_cache WHERE expires_at <= ?").bind(now),
      db
        .prepare(
          "INSERT INTO http_cache (url, status, content_type, body, truncated, fetched_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?) " +
            "ON CONFLICT (url) DO UPDATE SET status = excluded.status, content_type = excluded.content_type, body = excluded.body, " +
            "truncated = excluded.truncated, fetched_at = excluded.fetched_at, expires_at = excluded.expires_at",
        )
        .bind(output.final_url, output.status, output.content_type, output.body, output.truncated ? 1 : 0, now, now + ttlMs),
    ]);
  } catch {
    // The response is still returned; it is just not cached.
  }
}

function formatBytes(n: number): string {
  if (n >= 1_048_576 && n % 1_048_576 === 0) return `${n / 1_048_576} MiB`;
  if (n >= 1024 && n % 1024 === 0) return `${n / 1024} KiB`;
  return `${n} bytes`;
}

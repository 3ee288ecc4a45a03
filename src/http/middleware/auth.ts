/**
 * Bearer-token authentication with scopes (DESIGN §2 "Auth").
 *
 * - `admin`: the single `GATEWAY_ADMIN_TOKEN`.
 * - `api`: `GATEWAY_API_TOKENS`, a comma-separated list of `callerId:token` (callers with every agent), and the API key
 *   records of D1, `sgw_<key_id>_<secret>` (issue 25 §1, D-077: src/keys/lookup.ts), each acting as its caller with
 *   the agents and limits of its record (src/http/middleware/api-keys.ts). A key whose caller GATEWAY_API_TOKENS
 *   also names is refused unless its record says `share_caller` (issue 33, D-087): an env token added after the key
 *   must not silently merge two tenants.
 * - `sandbox`: tokens minted per session (src/security/sandbox-token.ts), accepted only on that session's
 *   tool-callback routes (src/http/webhooks/tool-callbacks.ts), where every other caller is 403.
 *
 * Scopes are disjoint: an admin token on an api route is 403, and the other
 * way round. Tokens are compared in constant time (SHA-256 digests compared
 * with `crypto.subtle.timingSafeEqual`, every candidate checked). Fail-closed:
 * no token configured, a malformed header, a token in the query string, or a
 * configured token too short to be safe → nobody gets in. Nothing is trusted
 * for coming from "local" addresses or for any other header.
 */
import type { MiddlewareHandler } from "hono";
import { GatewayError } from "../../errors";
import { type KeyGrant, type KeyRefusal, lookupKey } from "../../keys/lookup";
import type { Logger } from "../../observability/logger";
import { admitKeyRequest } from "./api-keys";
import type { AuthEnv, Principal } from "./principal";

export type Scope = "admin" | "api";

/** Configured tokens shorter than this are refused (and logged once): they are guessable. */
export const MIN_TOKEN_LENGTH = 16;

/** Query parameters that carry credentials in other systems; their presence is refused outright. */
const QUERY_CREDENTIAL_PARAMS = new Set(["access_token", "token", "api_key", "apikey", "key", "auth", "bearer", "authorization"]);

/** RFC 6750 `b64token`. */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;
const CALLER_ID = /^[A-Za-z0-9_.-]{1,64}$/;

const REALM = 'Bearer realm="sophie-gateway"';

interface TokenTable {
  admin: Uint8Array | undefined;
  api: { callerId: string; digest: Uint8Array }[];
}

async function digest(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

/** Parses the configured tokens; malformed entries are dropped and reported through `reject`. */
async function buildTokenTable(
  adminToken: string | undefined,
  apiTokens: string | undefined,
  reject: (variable: string, problem: string) => void,
): Promise<TokenTable> {
  const table: TokenTable = { admin: undefined, api: [] };
  const admin = adminToken?.trim() ?? "";
  if (admin.length > 0) {
    if (admin.length < MIN_TOKEN_LENGTH) reject("GATEWAY_ADMIN_TOKEN", `shorter than ${MIN_TOKEN_LENGTH} characters; ignored`);
    else if (!B64TOKEN.test(admin)) reject("GATEWAY_ADMIN_TOKEN", "contains characters outside RFC 6750 b64token; ignored");
    else table.admin = await digest(admin);
  }
  const seen = new Set<string>();
  const entries = (apiTokens ?? "").split(",").map((e) => e.trim());
  for (const [index, entry] of entries.entries()) {
    if (entry.length === 0) continue;
    const colon = entry.indexOf(":");
    const callerId = colon > 0 ? entry.slice(0, colon) : "";
    const token = colon > 0 ? entry.slice(colon + 1) : "";
    const where = `entry ${index + 1}`;
    if (!CALLER_ID.test(callerId))
      reject("GATEWAY_API_TOKENS", `${where}: expected callerId:token with callerId of letters, digits, _ . -; ignored`);
    else if (seen.has(callerId)) reject("GATEWAY_API_TOKENS", `${where}: caller "${callerId}" listed twice; ignored`);
    else if (token.length < MIN_TOKEN_LENGTH)
      reject("GATEWAY_API_TOKENS", `${where}: token for "${callerId}" shorter than ${MIN_TOKEN_LENGTH} characters; ignored`);
    else if (!B64TOKEN.test(token))
      reject("GATEWAY_API_TOKENS", `${where}: token for "${callerId}" has characters outside RFC 6750 b64token; ignored`);
    else {
      seen.add(callerId);
      table.api.push({ callerId, digest: await digest(token) });
    }
  }
  return table;
}

// Per isolate: the env strings do not change while it lives, so parse and hash them once.
let cached: { admin: string | undefined; api: string | undefined; table: Promise<TokenTable> } | undefined;

function tokenTable(env: AuthEnv, logger: Logger): Promise<TokenTable> {
  if (!cached || cached.admin !== env.GATEWAY_ADMIN_TOKEN || cached.api !== env.GATEWAY_API_TOKENS) {
    cached = {
      admin: env.GATEWAY_ADMIN_TOKEN,
      api: env.GATEWAY_API_TOKENS,
      table: buildTokenTable(env.GATEWAY_ADMIN_TOKEN, env.GATEWAY_API_TOKENS, (variable, problem) =>
        logger.log("warn", "auth.config_rejected", { variable, problem }),
      ),
    };
  }
  return cached.table;
}

function unauthorized(message: string, invalidToken = false): GatewayError {
  return new GatewayError("auth.unauthorized", message, {
    headers: { "WWW-Authenticate": invalidToken ? `${REALM}, error="invalid_token"` : REALM },
  });
}

/** Finds the principal a presented token belongs to, checking every candidate (no early exit). */
export async function identify(token: string, table: TokenTable): Promise<Principal | undefined> {
  const presented = await digest(token);
  let found: Principal | undefined;
  if (table.admin && crypto.subtle.timingSafeEqual(table.admin, presented)) found = { scope: "admin" };
  for (const entry of table.api) {
    if (crypto.subtle.timingSafeEqual(entry.digest, presented) && !found) found = { scope: "api", callerId: entry.callerId };
  }
  return found;
}

/** The callers of GATEWAY_API_TOKENS (well-formed entries only), for the admin's key checks (D-087). */
export async function envCallers(env: AuthEnv, logger: Logger): Promise<ReadonlySet<string>> {
  return new Set((await tokenTable(env, logger)).api.map((entry) => entry.callerId));
}

/** The api principal of an `sgw_` key record, or undefined (not a key, or refused: the reason is logged, not told). */
async function keyPrincipal(env: AuthEnv, token: string, table: TokenTable, logger: Logger | undefined): Promise<Principal | undefined> {
  if (!env.DB) return undefined;
  let found: Awaited<ReturnType<typeof lookupKey>>;
  try {
    found = await lookupKey(env.DB, token);
  } catch (err) {
    // D1 unreachable: the key cannot be checked, so it is not accepted — a retryable 503, not a 500.
    throw new GatewayError("internal.error", "API keys cannot be checked right now; retry shortly", {
      status: 503,
      internal: err instanceof Error ? err.message : String(err),
    });
  }
  if (!found) return undefined;
  const refused = (reason: KeyRefusal | "caller_in_env") => {
    logger?.log("info", "auth.key_refused", { key_id: token.slice(4, 20), reason });
    return undefined;
  };
  if (!found.ok) return refused(found.reason);
  // An env token for the key's caller, added after the key, would merge two tenants: refused until shared on purpose.
  if (callerTaken(table, found.grant)) return refused("caller_in_env");
  return { scope: "api", callerId: found.grant.callerId, key: found.grant };
}

/** Whether a GATEWAY_API_TOKENS entry names the key's caller without the key sharing it (D-087). */
function callerTaken(table: TokenTable, grant: KeyGrant): boolean {
  return !grant.shareCaller && table.api.some((entry) => entry.callerId === grant.callerId);
}

/** Extracts the token from `Authorization: Bearer <token>`, or explains why it cannot. */
export function parseAuthorization(header: string | undefined): string {
  if (header === undefined || header.length === 0) throw unauthorized("missing bearer token: send Authorization: Bearer <token>");
  const match = /^Bearer ([^\s]+)$/i.exec(header);
  if (!match?.[1] || !B64TOKEN.test(match[1])) throw unauthorized('malformed Authorization header: expected "Bearer <token>"');
  return match[1];
}

/** Refuses credentials in the URL: they end up in logs, caches and browser history. */
export function rejectQueryCredentials(url: string): void {
  for (const name of new URL(url).searchParams.keys()) {
    if (QUERY_CREDENTIAL_PARAMS.has(name.toLowerCase())) {
      throw unauthorized(`credentials are not accepted in the query string ("${name}"); send Authorization: Bearer <token>`);
    }
  }
}

/**
 * Middleware: the request must carry a valid bearer token of `scope`.
 * Sets `principal` on the context.
 */
export function requireScope(scope: Scope): MiddlewareHandler<{ Bindings: AuthEnv }> {
  return async function requireScope(c, next) {
    rejectQueryCredentials(c.req.url);
    const token = parseAuthorization(c.req.header("Authorization"));
    const env = c.env ?? {};
    const table = await tokenTable(env, c.get("logger"));
    const principal = (await identify(token, table)) ?? (await keyPrincipal(env, token, table, c.get("logger")));
    if (!principal) throw unauthorized("invalid bearer token", true);
    if (principal.scope !== scope) throw new GatewayError("auth.forbidden", `this route needs a token with the "${scope}" scope`);
    if (principal.scope === "api" && principal.key) await admitKeyRequest(c, principal.key);
    c.set("principal", principal);
    await next();
  };
}

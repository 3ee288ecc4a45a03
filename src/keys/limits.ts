/**
 * A key record's request limits (issue 25 §1, D-077), in one place for every door a key makes requests through:
 * each authenticated /v1 request (src/http/middleware/api-keys.ts) and each message frame of a WebSocket opened with
 * the key (src/sessions/websocket.ts, issue 33, D-086) — a socket is many requests over one upgrade.
 *  - Cloudflare's Rate Limiting binding `API_KEY_RATE_LIMITER`, where bound, sheds a flood at its fixed ceiling (one
 *    limit per binding, counted per location, eventually consistent) before anything else;
 *  - the key's own `limits.requestsPerMinute` is then exact: one atomic D1 upsert per request (src/keys/store.ts).
 * Either refusal is 429 `rate.limited` with the seconds left in the clock minute as its retry hint.
 */
import { GatewayError } from "../errors";
import { admitKeyRequest, type KeyLimits } from "./store";

/** The clock the per-minute counts are kept by (tests pin it, so a retry hint is an exact number). */
export const keyClock = { now: (): number => Date.now() };

/** The bindings the limits use; a deployment without the Rate Limiting binding skips the ceiling. */
export interface KeyLimitEnv {
  DB?: D1Database;
  API_KEY_RATE_LIMITER?: RateLimit;
}

/**
 * Counts one request of `keyId` under the ceiling and `limits.requestsPerMinute`: null when admitted, else the
 * refusal to answer with (a refused request is not counted). D1 unreachable: a retryable 503, never an uncounted pass.
 */
export async function keyRequestRefusal(
  env: KeyLimitEnv,
  keyId: string,
  limits: KeyLimits,
  now = keyClock.now(),
): Promise<GatewayError | null> {
  const retryAfterSeconds = 60 - Math.floor((now % 60_000) / 1000);
  const limit = limits.requestsPerMinute;
  try {
    if (env.API_KEY_RATE_LIMITER && !(await env.API_KEY_RATE_LIMITER.limit({ key: keyId })).success)
      return new GatewayError("rate.limited", `key ${keyId} is over the gateway's request ceiling; retry in ${retryAfterSeconds} s`, {
        retryAfterSeconds,
      });
    if (limit === undefined || !env.DB || (await admitKeyRequest(env.DB, keyId, limit, now))) return null;
  } catch {
    return new GatewayError("internal.error", "API keys cannot be checked right now; retry shortly", { status: 503 });
  }
  return new GatewayError("rate.limited", `key ${keyId} is limited to ${limit} requests per minute; retry in ${retryAfterSeconds} s`, {
    retryAfterSeconds,
  });
}

/**
 * What an API key record (issue 25 §1, D-077) adds to an api request once its key is accepted
 * (src/http/middleware/auth.ts):
 *  - requests per minute: the `API_KEY_RATE_LIMITER` ceiling, then the key's exact `limits.requestsPerMinute`
 *    (src/keys/limits.ts, shared with the key's WebSocket frames): 429 `rate.limited` with `Retry-After` (the seconds
 *    left in the minute);
 *  - the agents it may use: `requireAgent` answers 403 `auth.forbidden` for any other (`agentsOf` filters lists);
 *  - `last_used_at`: stamped at most once a minute per key, after the response (`waitUntil`);
 *  - issue 33 (D-086): what stays open on a key — an event stream, a streamed chat completion — checks the key
 *    before each piece it writes (`keyStreamGuard`), so a revoked, rotated or expired key gets nothing more.
 * Keys from GATEWAY_API_TOKENS carry no record: every agent, no per-key limit.
 */
import type { Context } from "hono";
import { GatewayError } from "../../errors";
import { keyRequestRefusal } from "../../keys/limits";
import type { KeyGrant } from "../../keys/lookup";
import { checkKey, keyChecks } from "../../keys/standing";
import { touchKey } from "../../keys/store";
import type { KeyBudget } from "../../runs/token-budget";
import type { AuthEnv, Principal } from "./principal";

/** How often `last_used_at` is written per key, at most. */
export const LAST_USED_INTERVAL_MS = 60_000;

const touched = new Map<string, number>();

/** Admits one request of `grant`'s key under its rate limits (429 otherwise) and stamps its use. */
export async function admitKeyRequest(c: Context<{ Bindings: AuthEnv }>, grant: KeyGrant): Promise<void> {
  const env = c.env ?? {};
  const refusal = await keyRequestRefusal(env, grant.keyId, grant.limits);
  if (refusal) throw refusal;
  if (env.DB) stampLastUsed(c, env.DB, grant.keyId, Date.now());
}

/** `last_used_at`, at most once a minute per key per isolate (and across isolates: the statement checks too), off the response path. */
function stampLastUsed(c: Context, db: D1Database, keyId: string, now: number): void {
  const last = touched.get(keyId);
  if (last !== undefined && now - last < LAST_USED_INTERVAL_MS) return;
  touched.set(keyId, now);
  const write = touchKey(db, keyId, new Date(now), LAST_USED_INTERVAL_MS).catch(() => touched.delete(keyId));
  try {
    c.executionCtx.waitUntil(write);
  } catch {
    // No execution context (the app called directly): the write goes on by itself.
  }
}

/** 403 unless the principal may use `agentId` (an env token, or a key listing it or every agent). */
export function requireAgent(principal: Principal | undefined, agentId: string): void {
  if (principal?.scope !== "api" || !principal.key || principal.key.agents === null) return;
  if (!principal.key.agents.includes(agentId))
    throw new GatewayError("auth.forbidden", `key ${principal.key.keyId} may not use agent "${agentId}"`);
}

/** Whether the principal may use `agentId` (for lists such as `GET /v1/models`). */
export function mayUseAgent(principal: Principal | undefined, agentId: string): boolean {
  return principal?.scope !== "api" || !principal.key || principal.key.agents === null || principal.key.agents.includes(agentId);
}

/** What a door adds to the turn it submits for this principal: the key's daily token budget, when it has one. */
export function keyTurnFields(principal: Principal | undefined): { keyBudget?: KeyBudget } {
  if (principal?.scope !== "api" || principal.key?.limits.tokensPerDay === undefined) return {};
  return { keyBudget: { keyId: principal.key.keyId, tokensPerDay: principal.key.limits.tokensPerDay } };
}

/** Thrown by a stream's key guard: the route tells `error` in the stream, in its own shape, and ends it (D-086). */
export class KeyStreamEnded extends Error {
  readonly error: GatewayError;
  constructor(error: GatewayError) {
    super(error.message);
    this.name = "KeyStreamEnded";
    this.error = error;
  }
}

/** What an open stream of a key awaits before each piece it writes, and how long it may idle between two checks. */
export interface KeyStreamGuard {
  /** Throws `KeyStreamEnded` once the key no longer stands. */
  check: () => Promise<void>;
  /** How long the stream may go without a check while nothing is written (Infinity: no key record to check). */
  idleMs: number;
}

/**
 * The guard an open stream of `agentId` awaits before each piece it writes (D-086): it throws `KeyStreamEnded` once
 * the request's key record no longer stands (revoked, rotated, expired, the agent taken away) or cannot be checked —
 * from the isolate's cached record, so no D1 read per piece. The stream also checks it every `idleMs` while idle.
 * For callers that are not key records it does nothing.
 */
export function keyStreamGuard(principal: Principal | undefined, db: D1Database | undefined, agentId: string): KeyStreamGuard {
  if (principal?.scope !== "api" || !principal.key || !db) return { check: async () => {}, idleMs: Number.POSITIVE_INFINITY };
  const grant = principal.key;
  return {
    check: async () => {
      const check = await checkKey(db, grant, agentId, "stream");
      if (!check.ok) throw new KeyStreamEnded(check.error);
    },
    idleMs: keyChecks.idleMs,
  };
}

/**
 * A presented `sgw_` key → the grant it carries (issue 25 §1, D-077), without a D1 read per request:
 * each isolate keeps the records it looked up, tagged with the `keys` generation (src/storage/admin-generation.ts)
 * read before the record. Rotating or revoking a key bumps that generation in the same D1 batch, and every isolate
 * re-reads the generation at most every ADMIN_REFRESH_MS, so a rotated or revoked key is refused (401) on every
 * isolate within ADMIN_REFRESH_MS (5 s) — at once on the isolate that made the change. Expiry needs no
 * propagation: it is checked against the clock on every use. Unknown key ids are not cached (a key created on
 * another isolate works at once); the cache is bounded.
 */
import { ADMIN_REFRESH_MS, adminGenerations } from "../storage/admin-generation";
import { parseApiKey, secretMatches } from "./format";
import { findKey, type KeyLimits, type KeyWithSecret } from "./store";

/** What an accepted key lets its bearer do. */
export interface KeyGrant {
  keyId: string;
  callerId: string;
  /** Agent ids the key may use; null = every agent. */
  agents: readonly string[] | null;
  limits: KeyLimits;
  /** A fingerprint of the secret in force when the key was accepted (an open socket re-checks it, D-077). */
  secretTag: string;
  /** Issue 33 (D-087): the key may act as a caller GATEWAY_API_TOKENS also names (the admin said so). */
  shareCaller: boolean;
}

/** Why a presented key was refused (the reason goes to the log, never to the caller: every refusal is one 401). */
export type KeyRefusal = "unknown" | "secret" | "revoked" | "expired";

/** The propagation bound: how long a rotated or revoked key may still work on an isolate that cached it. */
export const KEY_PROPAGATION_MS = ADMIN_REFRESH_MS;

const MAX_CACHED = 1_000;
const cache = new Map<string, { record: KeyWithSecret; generation: number }>();

/**
 * The record of `keyId`, from this isolate's copy while the keys generation is unchanged (unless `fresh`), else
 * from D1; `cached` says which.
 */
async function record(
  db: D1Database,
  keyId: string,
  now: number,
  fresh = false,
): Promise<{ found: KeyWithSecret | null; cached: boolean }> {
  const { keys: generation } = await adminGenerations(db, now); // read before the record: a change after it bumps it
  const hit = cache.get(keyId);
  if (hit && hit.generation === generation && !fresh) return { found: hit.record, cached: true };
  const found = await findKey(db, keyId);
  cache.delete(keyId);
  if (found) {
    if (cache.size >= MAX_CACHED) cache.delete(cache.keys().next().value as string); // the oldest entry
    cache.set(keyId, { record: found, generation });
  }
  return { found, cached: false };
}

/** The grant of a presented key, or why it is refused; null when `token` is not shaped like a key at all. */
export async function lookupKey(
  db: D1Database,
  token: string,
): Promise<{ ok: true; grant: KeyGrant } | { ok: false; reason: KeyRefusal } | null> {
  const parsed = parseApiKey(token);
  if (!parsed) return null;
  const now = Date.now();
  let { found, cached } = await record(db, parsed.keyId, now);
  // Hashed and compared whether or not the record exists (a dummy hash stands in), so a forged id costs the same.
  let matches = await secretMatches(found ? { salt: found.salt, secretHash: found.secret_hash } : null, parsed.secret);
  if (!matches && cached) {
    // The key may have been rotated on another isolate since this copy was read: its new secret is asked of D1.
    ({ found } = await record(db, parsed.keyId, now, true));
    matches = await secretMatches(found ? { salt: found.salt, secretHash: found.secret_hash } : null, parsed.secret);
  }
  if (!found) return { ok: false, reason: "unknown" };
  if (!matches) return { ok: false, reason: "secret" };
  if (found.revoked_at !== null) return { ok: false, reason: "revoked" };
  if (found.expires_at !== null && Date.parse(found.expires_at) <= now) return { ok: false, reason: "expired" };
  const grant = {
    keyId: found.key_id,
    callerId: found.caller_id,
    agents: found.agents,
    limits: found.limits,
    shareCaller: found.share_caller,
  };
  return { ok: true, grant: { ...grant, secretTag: found.secret_hash.slice(0, 16) } };
}

/**
 * Whether the key of `grant` still stands as it did when accepted (`gone`: revoked, rotated or expired) and still
 * lists `agentId` (`agent`: a PATCH took it away), from the same cache: a WebSocket opened with a key checks it
 * before each turn it takes.
 */
export async function keyStanding(
  db: D1Database,
  grant: Pick<KeyGrant, "keyId" | "secretTag">,
  agentId: string,
): Promise<"ok" | "gone" | "agent"> {
  const now = Date.now();
  const { found } = await record(db, grant.keyId, now);
  if (!found || found.revoked_at !== null || found.secret_hash.slice(0, 16) !== grant.secretTag) return "gone";
  if (found.expires_at !== null && Date.parse(found.expires_at) <= now) return "gone";
  return found.agents === null || found.agents.includes(agentId) ? "ok" : "agent";
}

/** Drops this isolate's copy of one key (the isolate that rotated or revoked it sees the change at once). */
export function forgetKey(keyId: string): void {
  cache.delete(keyId);
}

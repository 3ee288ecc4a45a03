/**
 * Issue 33 (D-086): what stays open on a key record — a WebSocket, `GET /v1/runs/{id}/events`, a streamed
 * `/v1/chat/completions` — asks whether the key still stands before each turn or piece it delivers, so nothing more
 * reaches a revoked, rotated or expired key once the `keys` generation has reached the isolate (at most
 * ADMIN_REFRESH_MS, the bound a request already has). The answer comes from the isolate's cached record
 * (src/keys/lookup.ts): no D1 read per piece while the generation is unchanged.
 *
 * What idles is checked too: an open stream or socket of a key asks at least every `keyChecks.idleMs` while nothing
 * is delivered, so an idle one closes within that of the change reaching its isolate (at once on the isolate that
 * made it, within ADMIN_REFRESH_MS on the others) — not at its next heartbeat, 15 to 25 s later.
 */
import { GatewayError } from "../errors";
import { KEY_PROPAGATION_MS, type KeyGrant, keyStanding } from "./lookup";
import type { KeyLimits } from "./store";

/**
 * How long an open stream or socket of a key may go without checking it: the propagation bound itself (a check costs
 * no D1 read while the generation is unchanged). Mutable for tests only, as `keyClock` is.
 */
export const keyChecks = { idleMs: KEY_PROPAGATION_MS };

/** The key stands (with its limits now); or the error to end with — `final` when the key will not stand again. */
export type KeyCheck = { ok: true; limits: KeyLimits } | { ok: false; final: boolean; error: GatewayError };

/** Checks the key of `grant` for a `socket` or `stream` of agent `agentId`. D1 unreachable: not confirmed, so refused. */
export async function checkKey(
  db: D1Database,
  grant: Pick<KeyGrant, "keyId" | "secretTag">,
  agentId: string,
  holder: "socket" | "stream",
): Promise<KeyCheck> {
  let standing: Awaited<ReturnType<typeof keyStanding>>;
  try {
    standing = await keyStanding(db, grant, agentId);
  } catch {
    const error = new GatewayError("internal.error", "API keys cannot be checked right now; retry shortly", { status: 503 });
    return { ok: false, final: false, error };
  }
  if (standing.ok) return standing;
  if (standing.reason === "agent")
    return { ok: false, final: true, error: new GatewayError("auth.forbidden", `key ${grant.keyId} may not use agent "${agentId}"`) };
  const message = `the API key this ${holder} was opened with was revoked, rotated or has expired`;
  return { ok: false, final: true, error: new GatewayError("auth.unauthorized", message) };
}

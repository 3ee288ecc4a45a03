/**
 * What signs an outbound webhook (issue 33, D-089): job notifications, budget alerts and API callers' completion
 * webhooks carry two Standard Webhooks signatures over the same `{webhook-id}.{webhook-timestamp}.{body}`:
 *
 * - `v1a,` Ed25519 with the gateway's signing key (src/security/signing-key.ts), checked with the public JWKS at
 *   `GET /.well-known/jwks.json` — a receiver needs no secret, and holding one lets nobody sign as the gateway;
 * - `v1,` HMAC-SHA256 with **the endpoint's own key**, for receivers that only speak `v1`. One shared
 *   SCHEDULER_WEBHOOK_SECRET signed everything before, so any receiver could forge any other's webhooks. Now the
 *   key is derived from it with HKDF-SHA256 per owner and endpoint: the operator's (jobs, alerts) and each API
 *   caller's, times the URL's origin and path. The query is left out so a receiver that tags its URL per run keeps
 *   one secret. Derived, not stored: nothing to migrate or leak from D1, and rotating the master rotates them all.
 *   A receiver reads its secret from `GET /v1/webhook-secret?url=` (a caller, for its own runs) or
 *   `GET /api/admin/webhook-secret?url=` (the operator, for jobs and alerts).
 */
import { webhookKey } from "../channels/standard-webhooks";
import { type GatewaySigner, gatewaySigningKeys, type SigningEnv } from "../security/signing-key";

/** Whose webhook it is: the operator's (jobs, budget alerts) or one API caller's (its runs' completion webhooks). */
export type WebhookOwner = { operator: true } | { callerId: string };

export type WebhookSecretsEnv = SigningEnv & { SCHEDULER_WEBHOOK_SECRET?: string | undefined };

export type WebhookSigning = { ok: true; key: Uint8Array; signer: GatewaySigner } | { ok: false; error: string };

/** Fixed per purpose, so a key derived here is never a key derived for anything else from the same master. */
const HKDF_SALT = new TextEncoder().encode("sophie-gateway webhook endpoint key v1");
export const NO_MASTER = "SCHEDULER_WEBHOOK_SECRET is not set to a whsec_ secret";

/** The part of a URL a key belongs to: origin and path, no query or fragment. */
export function webhookEndpoint(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

/** The endpoint's `v1` key bytes: HKDF-SHA256(master, salt, info = [owner, endpoint]), 32 bytes. */
export async function endpointWebhookKey(master: Uint8Array, owner: WebhookOwner, endpoint: string): Promise<Uint8Array> {
  // JSON keeps the two parts apart whatever they contain; "operator" is no caller id's spelling ("caller:…").
  const info = new TextEncoder().encode(JSON.stringify(["operator" in owner ? "operator" : `caller:${owner.callerId}`, endpoint]));
  const ikm = await crypto.subtle.importKey("raw", master, "HKDF", false, ["deriveBits"]);
  return new Uint8Array(await crypto.subtle.deriveBits({ name: "HKDF", hash: "SHA-256", salt: HKDF_SALT, info }, ikm, 256));
}

/** `whsec_` + base64: the form every Standard Webhooks library takes. */
export function whsecOf(key: Uint8Array): string {
  return `whsec_${btoa(String.fromCharCode(...key))}`;
}

/** The endpoint's `v1` secret as a receiver configures it, or null without a master secret. */
export async function endpointSecret(env: WebhookSecretsEnv, owner: WebhookOwner, url: URL): Promise<string | null> {
  const master = webhookKey(env.SCHEDULER_WEBHOOK_SECRET);
  return master ? whsecOf(await endpointWebhookKey(master, owner, webhookEndpoint(url))) : null;
}

/** Both keys one webhook to `url` is signed with, or why it cannot be signed (the delivery then fails, naming it). */
export async function webhookSigning(env: WebhookSecretsEnv, owner: WebhookOwner, url: URL): Promise<WebhookSigning> {
  const master = webhookKey(env.SCHEDULER_WEBHOOK_SECRET);
  if (!master) return { ok: false, error: NO_MASTER };
  const keys = await gatewaySigningKeys(env);
  if (!keys.ok) return { ok: false, error: keys.problem };
  return { ok: true, key: await endpointWebhookKey(master, owner, webhookEndpoint(url)), signer: keys.signer };
}

/** Why no webhook can be signed on this gateway's key (for the checks made when one is asked for), or null. */
export async function signingKeyProblem(env: SigningEnv): Promise<string | null> {
  const keys = await gatewaySigningKeys(env);
  return keys.ok ? null : keys.problem;
}

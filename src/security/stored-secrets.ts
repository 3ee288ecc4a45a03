/**
 * Stored secrets in use: the values an admin ingested through `POST /api/admin/secrets` (encrypted in D1,
 * src/security/secrets-store.ts) are laid over the Worker's env, so a provider key or a channel secret can be
 * set or rotated from the dashboard without a deploy. A stored value wins over the Worker secret of the same
 * name (the admin's newer act). Every isolate picks a change up within `ADMIN_REFRESH_MS`.
 *
 * Fail closed on names: only the secrets the gateway reads can be stored (`storableSecretName`). The two that
 * guard the store itself — the admin token and the encryption key — come from the deployment only, so a leaked
 * admin token cannot replace them, and no stored name can shadow a binding (DB, SESSIONS, AUDIT…).
 * The overlaid values are literal-redacted like every other secret (they are in the env `secretValuesFromEnv` reads).
 */
import { adminGenerations } from "../storage/admin-generation";
import { STORED_SECRET_ORIGINS } from "./secret-origins";
import { decryptAllSecrets, secretsKey } from "./secrets-store";

/** Secrets the gateway reads besides provider keys (`<PROVIDER>_API_KEY`). */
export const GATEWAY_SECRET_NAMES = [
  "DISCORD_APPLICATION_ID",
  "DISCORD_BOT_TOKEN",
  "DISCORD_PUBLIC_KEY",
  "GATEWAY_API_TOKENS",
  "SANDBOX_TOKEN_SECRET",
  "SCHEDULER_WEBHOOK_SECRET",
  "SLACK_BOT_TOKEN",
  "SLACK_SIGNING_SECRET",
  "STANDARD_WEBHOOK_SECRET",
  "TELEGRAM_BOT_TOKEN",
  "TELEGRAM_WEBHOOK_SECRET",
] as const;

/**
 * Set with `wrangler secret put` only: they protect the store and the admin API, or — the signing key and the
 * retired public keys published beside it (D-089) — say what the gateway signed, which a leaked admin token must not
 * be able to change.
 */
export const DEPLOYMENT_ONLY_SECRETS = [
  "GATEWAY_ADMIN_TOKEN",
  "SECRETS_ENCRYPTION_KEY",
  "GATEWAY_SIGNING_KEY",
  "GATEWAY_SIGNING_KEYS_RETIRED",
] as const;

const PROVIDER_KEY = /^[A-Z][A-Z0-9_]{0,31}_API_KEY$/;

/**
 * Inbound webhook secrets: when one is replaced through the API, the value in force before stays accepted for
 * `channels.secretRotationOverlapSeconds` (the sender may still sign with it), counted from the replacement.
 */
export const ROTATION_OVERLAP_SECRETS = [
  "DISCORD_PUBLIC_KEY",
  "SLACK_SIGNING_SECRET",
  "STANDARD_WEBHOOK_SECRET",
  "TELEGRAM_WEBHOOK_SECRET",
] as const;

/** Outbound credentials: bound to an origin (src/security/secret-origins.ts). */
export function isOriginBoundSecret(name: string): boolean {
  return PROVIDER_KEY.test(name) || name === "TELEGRAM_BOT_TOKEN" || name === "SLACK_BOT_TOKEN" || name === "DISCORD_BOT_TOKEN";
}

/** Where the merged env carries the previous values of rotated inbound secrets. */
export const PREVIOUS_SECRETS: unique symbol = Symbol.for("sophie.previousSecrets");
type Previous = Record<string, { value: string; rotatedAt: number }>;

/**
 * The values of inbound secret `name` accepted at `nowMs`: the current one, then the previous one while the
 * overlap lasts (`overlapSeconds` after it was replaced through the API).
 */
export function acceptedSecrets(env: object, name: string, nowMs: number, overlapSeconds: number): string[] {
  const current = (env as Record<string, unknown>)[name];
  const out = typeof current === "string" ? [current] : [];
  const previous = (env as { [PREVIOUS_SECRETS]?: Previous })[PREVIOUS_SECRETS]?.[name];
  if (previous && previous.value !== current && nowMs - previous.rotatedAt < overlapSeconds * 1000) out.push(previous.value);
  return out;
}

/** Why `name` cannot be stored, or null when it can. */
export function storableSecretName(name: string): string | null {
  if ((DEPLOYMENT_ONLY_SECRETS as readonly string[]).includes(name))
    return `${name} can only be set as a Worker secret (wrangler secret put), not through the API`;
  if ((GATEWAY_SECRET_NAMES as readonly string[]).includes(name) || PROVIDER_KEY.test(name)) return null;
  return `${name} is not a secret the gateway reads; it reads <PROVIDER>_API_KEY and ${GATEWAY_SECRET_NAMES.join(", ")}`;
}

type SecretsEnv = { DB: D1Database; SECRETS_ENCRYPTION_KEY?: string };

interface Overlay {
  generation: number;
  values: Record<string, string>;
  /** Per stored name: the origin it is bound to, or null (bound like a Worker secret). */
  origins: Record<string, string | null>;
  previous: Previous;
}

/** This isolate's decrypted overlay, for the secrets generation it was read at. */
let overlay: Overlay | undefined;
/** Merged envs, per base env object, so a request pays for the spread once per generation. */
let merged = new WeakMap<object, { generation: number; env: object }>();

/** The stored secrets (decrypted), read again only when the generation moved. Empty without a valid key. */
export async function storedSecretValues(env: SecretsEnv, now = Date.now()): Promise<Overlay> {
  const { secrets: generation } = await adminGenerations(env.DB, now);
  if (overlay && overlay.generation === generation) return overlay;
  const key = generation === 0 ? null : await secretsKey(env.SECRETS_ENCRYPTION_KEY);
  const stored = key ? await decryptAllSecrets(env.DB, key) : {};
  const next: Overlay = { generation, values: {}, origins: {}, previous: {} };
  for (const [name, secret] of Object.entries(stored)) {
    // A name stored before the rules tightened is never laid over the env.
    if (storableSecretName(name) !== null) continue;
    next.values[name] = secret.value;
    next.origins[name] = secret.origin;
    if (secret.previous) next.previous[name] = secret.previous;
  }
  overlay = next;
  return overlay;
}

/** `env` with the stored secrets laid over it (the same object when none are stored). */
export async function envWithStoredSecrets<E extends SecretsEnv>(env: E, now = Date.now()): Promise<E> {
  const { generation, values, origins, previous } = await storedSecretValues(env, now);
  if (Object.keys(values).length === 0) return env;
  const hit = merged.get(env);
  if (hit && hit.generation === generation) return hit.env as E;
  // The values and their bindings travel together in one object: a request never pairs a value with another write's origin.
  const next = { ...env, ...values, [STORED_SECRET_ORIGINS]: origins, [PREVIOUS_SECRETS]: previous } as E;
  merged.set(env, { generation, env: next });
  return next;
}

/**
 * Lays the stored secrets over `live` in place (for a Durable Object, whose env object is shared with its run
 * engine): stored names get their values; names no longer stored get back their value from `base`.
 */
export async function refreshStoredSecrets(live: Record<string, unknown>, base: SecretsEnv, now = Date.now()): Promise<void> {
  const { values, origins, previous } = await storedSecretValues(base, now);
  (live as Record<symbol, unknown>)[STORED_SECRET_ORIGINS] = origins;
  (live as Record<symbol, unknown>)[PREVIOUS_SECRETS] = previous;
  const names = new Set([...GATEWAY_SECRET_NAMES, ...Object.keys(live).filter((n) => PROVIDER_KEY.test(n)), ...Object.keys(values)]);
  for (const name of names) {
    const value = values[name] ?? (base as Record<string, unknown>)[name];
    if (value === undefined) delete live[name];
    else live[name] = value;
  }
}

/** Forgets this isolate's overlay (tests). */
export function forgetStoredSecrets(): void {
  overlay = undefined;
  merged = new WeakMap();
}

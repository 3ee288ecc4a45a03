/**
 * Sandbox tokens (DESIGN "Auth", S5 §6.3): minted by an admin for one session,
 * presented by a sandbox on that session's tool-callback routes and nowhere
 * else. Stateless and signed:
 *
 *   sbx1.<base64url(JSON {sid, iat, exp, jti})>.<base64url(HMAC-SHA256(secret, "sbx1." + payload))>
 *
 * The secret is `SANDBOX_TOKEN_SECRET` (at least 32 characters; without it no
 * token is minted and none is accepted). Verification recomputes the MAC and
 * compares in constant time, then checks the expiry and that the token names
 * exactly the session of the route. Tokens are never stored; `jti` lets the
 * audit log name the token that was minted without containing it.
 */

const PREFIX = "sbx1";
export const MIN_SECRET_LENGTH = 32;

export interface SandboxClaims {
  /** The session id (`ses_…`) the token is bound to. */
  sid: string;
  /** Issued at and expiry, Unix seconds. */
  iat: number;
  exp: number;
  /** Token id, for the audit log. */
  jti: string;
}

export type SandboxVerdict =
  | { ok: true; claims: SandboxClaims }
  | { ok: false; reason: "no_secret" | "malformed" | "signature" | "expired" | "other_session" };

const encoder = new TextEncoder();

function base64url(bytes: Uint8Array): string {
  return btoa(String.fromCharCode(...bytes))
    .replaceAll("+", "-")
    .replaceAll("/", "_")
    .replace(/=+$/, "");
}

function fromBase64url(text: string): Uint8Array | null {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) return null;
  try {
    return Uint8Array.from(atob(text.replaceAll("-", "+").replaceAll("_", "/")), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

async function mac(secret: string, content: string): Promise<Uint8Array> {
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(content)));
}

/** Whether the secret is usable (set and long enough). */
export function sandboxSecretUsable(secret: string | undefined): secret is string {
  return typeof secret === "string" && secret.length >= MIN_SECRET_LENGTH;
}

/** Mints a token for `sessionId`, valid `ttlSeconds` from `nowSeconds`. */
export async function mintSandboxToken(
  secret: string,
  sessionId: string,
  nowSeconds: number,
  ttlSeconds: number,
): Promise<{ token: string; claims: SandboxClaims }> {
  const jti = `sbt_${[...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
  const claims: SandboxClaims = { sid: sessionId, iat: nowSeconds, exp: nowSeconds + ttlSeconds, jti };
  const payload = base64url(encoder.encode(JSON.stringify(claims)));
  const signature = base64url(await mac(secret, `${PREFIX}.${payload}`));
  return { token: `${PREFIX}.${payload}.${signature}`, claims };
}

/** Verifies `token` for the session `sessionId` at `nowSeconds`. */
export async function verifySandboxToken(
  secret: string | undefined,
  token: string,
  sessionId: string,
  nowSeconds: number,
): Promise<SandboxVerdict> {
  if (!sandboxSecretUsable(secret)) return { ok: false, reason: "no_secret" };
  const parts = token.split(".");
  if (parts.length !== 3 || parts[0] !== PREFIX) return { ok: false, reason: "malformed" };
  const [, payload = "", signature = ""] = parts;
  const given = fromBase64url(signature);
  const expected = await mac(secret, `${PREFIX}.${payload}`);
  if (!given || given.length !== expected.length || !crypto.subtle.timingSafeEqual(given, expected))
    return { ok: false, reason: "signature" };
  let claims: SandboxClaims;
  try {
    claims = JSON.parse(new TextDecoder().decode(fromBase64url(payload) ?? new Uint8Array())) as SandboxClaims;
  } catch {
    return { ok: false, reason: "malformed" };
  }
  if (typeof claims.sid !== "string" || !Number.isSafeInteger(claims.exp)) return { ok: false, reason: "malformed" };
  if (claims.exp <= nowSeconds) return { ok: false, reason: "expired" };
  if (claims.sid !== sessionId) return { ok: false, reason: "other_session" };
  return { ok: true, claims };
}

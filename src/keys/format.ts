/**
 * The shape of an API key record's secret (issue 25 §1, D-077): `sgw_<key_id>_<secret>`.
 * - `sgw_` lets secret scanners (and the gateway's own redaction) recognise a leaked key;
 * - `key_id` (16 hex digits) names the record, so finding it is one read by primary key, never a scan of hashes;
 * - `secret` is 32 random bytes in base64url (43 characters): 256 bits, so one salted SHA-256 is enough (there is
 *   nothing to brute-force as with a password).
 * Only `SHA-256(salt || secret)` is stored, with a per-key random salt (new at every rotation), and a presented key
 * is checked with `crypto.subtle.timingSafeEqual`; a key id with no record is checked against a dummy hash, so a
 * forged key and a wrong secret take the same path.
 */

/** A key as presented: `sgw_`, the key id, `_`, the secret. */
export const API_KEY = /^sgw_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;
/** A key id as routes take it. */
export const KEY_ID = /^[0-9a-f]{16}$/;

/** The parts of a presented key, or null when it is not one. */
export function parseApiKey(token: string): { keyId: string; secret: string } | null {
  const m = API_KEY.exec(token);
  return m?.[1] && m[2] ? { keyId: m[1], secret: m[2] } : null;
}

const hex = (bytes: Uint8Array): string => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/** A new key id (8 random bytes, hex). */
export function newKeyId(): string {
  return hex(crypto.getRandomValues(new Uint8Array(8)));
}

/** What a new (or rotated) secret is stored as: never the secret itself. */
export interface StoredSecret {
  salt: string;
  secretHash: string;
  prefix: string;
}

/** SHA-256 of `salt || secret`, hex. */
async function saltedHash(salt: string, secret: string): Promise<string> {
  return hex(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(`${salt}${secret}`))));
}

/** A fresh secret for `keyId`: the full key (shown once) and what is stored. */
export async function mintSecret(keyId: string): Promise<{ key: string; stored: StoredSecret }> {
  const secret = base64url(crypto.getRandomValues(new Uint8Array(32)));
  const salt = hex(crypto.getRandomValues(new Uint8Array(16)));
  return {
    key: `sgw_${keyId}_${secret}`,
    stored: { salt, secretHash: await saltedHash(salt, secret), prefix: `sgw_${keyId}_${secret.slice(0, 4)}` },
  };
}

// A record that does not exist is checked against this, so an unknown key id costs what a wrong secret costs.
const DUMMY = { salt: "00".repeat(16), secretHash: "00".repeat(32) };

/** Whether `secret` is the one `stored` was made from (null: no record; still hashed and compared, then false). */
export async function secretMatches(stored: Pick<StoredSecret, "salt" | "secretHash"> | null, secret: string): Promise<boolean> {
  const against = stored ?? DUMMY;
  const enc = new TextEncoder();
  const presented = enc.encode(await saltedHash(against.salt, secret));
  const expected = enc.encode(against.secretHash);
  const same = presented.byteLength === expected.byteLength && crypto.subtle.timingSafeEqual(presented, expected);
  return stored !== null && same;
}

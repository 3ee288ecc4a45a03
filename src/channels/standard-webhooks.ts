/**
 * The Standard Webhooks signature scheme (standardwebhooks.com), both ways:
 * signing what the gateway sends (job notifications) and verifying what it
 * receives (the `standard` channel).
 *
 *   webhook-id:        msg_…  (the same on every retry of one message)
 *   webhook-timestamp: Unix seconds of this attempt
 *   webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>  (space-separated list)
 *
 * The secret is `whsec_` + base64 of the key bytes. Verification compares in
 * constant time and refuses timestamps more than five minutes away.
 */

const SECRET = /^whsec_([A-Za-z0-9+/]+={0,2})$/;
export const TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;

/** The key bytes of a `whsec_…` secret, or null when it is not one (at least 16 bytes of key). */
export function webhookKey(secret: string | undefined): Uint8Array | null {
  const m = SECRET.exec(secret ?? "");
  if (!m) return null;
  let bytes: Uint8Array;
  try {
    bytes = Uint8Array.from(atob(m[1] as string), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
  return bytes.length >= 16 ? bytes : null;
}

async function hmac(key: Uint8Array, content: string): Promise<Uint8Array> {
  const k = await crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", k, new TextEncoder().encode(content)));
}

const base64 = (bytes: Uint8Array) => btoa(String.fromCharCode(...bytes));

/** The `webhook-signature` value for one message. */
export async function signWebhook(key: Uint8Array, id: string, timestampSeconds: number, body: string): Promise<string> {
  return `v1,${base64(await hmac(key, `${id}.${timestampSeconds}.${body}`))}`;
}

export type WebhookVerdict = { ok: true } | { ok: false; reason: "missing_headers" | "timestamp" | "signature" };

/** Verifies a received message's headers against `key`, at `nowSeconds`. */
export async function verifyWebhook(
  key: Uint8Array,
  headers: { id: string | null; timestamp: string | null; signature: string | null },
  body: string,
  nowSeconds: number,
): Promise<WebhookVerdict> {
  if (!headers.id || !headers.timestamp || !headers.signature) return { ok: false, reason: "missing_headers" };
  if (!/^\d{1,12}$/.test(headers.timestamp)) return { ok: false, reason: "timestamp" };
  const ts = Number(headers.timestamp);
  if (Math.abs(nowSeconds - ts) > TIMESTAMP_TOLERANCE_SECONDS) return { ok: false, reason: "timestamp" };
  const expected = await hmac(key, `${headers.id}.${ts}.${body}`);
  for (const entry of headers.signature.split(" ")) {
    const [version, value] = entry.split(",", 2);
    if (version !== "v1" || !value) continue;
    let given: Uint8Array;
    try {
      given = Uint8Array.from(atob(value), (c) => c.charCodeAt(0));
    } catch {
      continue;
    }
    if (given.length === expected.length && crypto.subtle.timingSafeEqual(given, expected)) return { ok: true };
  }
  return { ok: false, reason: "signature" };
}

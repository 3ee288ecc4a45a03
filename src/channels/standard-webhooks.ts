/**
 * The Standard Webhooks signature scheme (standardwebhooks.com), both ways:
 * signing what the gateway sends (job notifications) and verifying what it
 * receives (the `standard` channel), plus the `standard` channel's inbound
 * body.
 *
 *   webhook-id:        msg_…  (the same on every retry of one message)
 *   webhook-timestamp: Unix seconds of this attempt
 *   webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>  (space-separated list)
 *                      v1a,<base64 Ed25519 signature of the same content>   (the gateway's own outbound webhooks)
 *
 * The secret is `whsec_` + base64 of the key bytes (at least 16 of them). The `v1a` entry (issue 33, D-089) is
 * made with the gateway's signing key (src/security/signing-key.ts) and checked with its public JWKS.
 *
 * Verification contract (`verifyWebhook`), checks in this order, one reason
 * per request; it never throws and never echoes the secret or a signature:
 * - `no_secret`: no key, or a key shorter than 16 bytes (fail closed).
 * - `missing_headers`: a header is absent or empty.
 * - `timestamp`: not 1–12 ASCII digits (no sign, fraction, exponent or
 *   spaces), or more than 300 s before or after `nowSeconds` (either way; a
 *   non-finite clock refuses everything).
 * - `signature`: no entry of the space-separated list is `v1,` followed by
 *   exactly the expected base64 text. Several entries are allowed so a sender
 *   can rotate keys (sign with old and new); other versions (`v1a,`, `v2,`)
 *   are skipped, never tried as `v1`. The comparison is on the canonical
 *   base64 *text*, in constant time after an equal-length check — not on
 *   decoded bytes, because `atob` forgives missing padding, embedded
 *   whitespace and non-zero trailing bits, which would let several spellings
 *   of one signature pass.
 * - The signed content uses the timestamp as a decimal number (so `0161…`
 *   is signed as `161…`), like the reference implementation.
 *
 * `parseStandardInbound` validates the channel's JSON body strictly (unknown
 * fields refused); its error text names the field and the rule, never the
 * value.
 */
import { z } from "zod";
import type { GatewaySigner } from "../security/signing-key";

const SECRET = /^whsec_([A-Za-z0-9+/]+={0,2})$/;
export const TIMESTAMP_TOLERANCE_SECONDS = 5 * 60;
/** The shortest key `webhookKey` and `verifyWebhook` accept, in bytes. */
export const MIN_WEBHOOK_KEY_BYTES = 16;

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
  return bytes.length >= MIN_WEBHOOK_KEY_BYTES ? bytes : null;
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

/** The `v1a` entry for one message: the gateway's Ed25519 signature over the content `v1` signs. */
export async function signWebhookV1a(signer: GatewaySigner, id: string, timestampSeconds: number, body: string): Promise<string> {
  return `v1a,${base64(await signer.sign(new TextEncoder().encode(`${id}.${timestampSeconds}.${body}`)))}`;
}

export type WebhookVerdict = { ok: true } | { ok: false; reason: "no_secret" | "missing_headers" | "timestamp" | "signature" };

/** Verifies a received message's headers against `key` (from `webhookKey`), at `nowSeconds`. Never throws. */
export async function verifyWebhook(
  key: Uint8Array | null | undefined,
  headers: { id: string | null; timestamp: string | null; signature: string | null },
  body: string,
  nowSeconds: number,
): Promise<WebhookVerdict> {
  if (!(key instanceof Uint8Array) || key.length < MIN_WEBHOOK_KEY_BYTES) return { ok: false, reason: "no_secret" };
  if (!headers.id || !headers.timestamp || !headers.signature) return { ok: false, reason: "missing_headers" };
  if (!/^\d{1,12}$/.test(headers.timestamp)) return { ok: false, reason: "timestamp" };
  const ts = Number(headers.timestamp);
  // Written so that a NaN clock fails too.
  if (!(Math.abs(nowSeconds - ts) <= TIMESTAMP_TOLERANCE_SECONDS)) return { ok: false, reason: "timestamp" };
  try {
    const encoder = new TextEncoder();
    const expected = encoder.encode(base64(await hmac(key, `${headers.id}.${ts}.${body}`)));
    for (const entry of headers.signature.split(" ")) {
      if (!entry.startsWith("v1,")) continue;
      const given = encoder.encode(entry.slice(3));
      if (given.length === expected.length && crypto.subtle.timingSafeEqual(given, expected)) return { ok: true };
    }
  } catch {
    // Unreachable with a valid key; a verifier answers with a verdict, not an exception.
  }
  return { ok: false, reason: "signature" };
}

// ---------------------------------------------------------------------------
// The `standard` channel's inbound body

/** `user_id` and `room_id`: 1–128 of `A-Z a-z 0-9 + . _ @ = -`. */
export const STANDARD_ID = /^[A-Za-z0-9+._@=-]{1,128}$/;
export const MAX_STANDARD_MESSAGE_CHARS = 100_000;

const ID_RULE = "must be 1–128 characters of A-Z a-z 0-9 + . _ @ = -";
const StandardId = z.string({ error: `must be a string; ${ID_RULE}` }).regex(STANDARD_ID, ID_RULE);

export const StandardInbound = z.strictObject(
  {
    user_id: StandardId,
    room_id: StandardId,
    message: z
      .string({ error: "must be a string" })
      .min(1, "must not be empty")
      .max(MAX_STANDARD_MESSAGE_CHARS, `must be at most ${MAX_STANDARD_MESSAGE_CHARS} characters`),
  },
  { error: "must be a JSON object" },
);
export type StandardInbound = z.output<typeof StandardInbound>;

/** Validates a parsed `standard` channel body. Error text names fields and rules only, never submitted values or unknown key names. */
export function parseStandardInbound(body: unknown): { ok: true; value: StandardInbound } | { ok: false; error: string } {
  const r = StandardInbound.safeParse(body);
  if (r.success) return { ok: true, value: r.data };
  const issue = r.error.issues[0];
  if (!issue) return { ok: false, error: "invalid body" };
  if (issue.code === "unrecognized_keys") return { ok: false, error: "unknown field; allowed: user_id, room_id, message" };
  const field = issue.path.length > 0 ? issue.path.map(String).join(".") : "body";
  const key = issue.path[0];
  if (issue.path.length === 1 && typeof key === "string" && typeof body === "object" && body !== null && !Object.hasOwn(body, key)) {
    return { ok: false, error: `${field}: required` };
  }
  return { ok: false, error: `${field}: ${issue.message}` };
}

/** The outcome of one signed delivery: accepted, or why not and whether a retry may succeed. */
export type SignedPostResult = { ok: true; status: number } | { ok: false; retry: boolean; status: number | null; error: string };

/**
 * POSTs `body` to `url` signed for message `id` (a fresh timestamp per attempt): `v1` with `key`, and `v1a` too with
 * `signer` when given. Redirects are never followed; network errors, timeouts, 408, 429 and 5xx are retryable,
 * other answers are not. Receivers dedupe on `id`.
 */
export async function postSignedWebhook(o: {
  url: string;
  key: Uint8Array;
  signer?: GatewaySigner;
  id: string;
  body: string;
  timeoutMs: number;
  fetch?: typeof fetch;
}): Promise<SignedPostResult> {
  const timestamp = Math.floor(Date.now() / 1000);
  const signatures = [await signWebhook(o.key, o.id, timestamp, o.body)];
  if (o.signer) signatures.push(await signWebhookV1a(o.signer, o.id, timestamp, o.body));
  let response: Response;
  try {
    response = await (o.fetch ?? fetch)(o.url, {
      method: "POST",
      redirect: "manual",
      signal: AbortSignal.timeout(o.timeoutMs),
      headers: {
        "content-type": "application/json",
        "user-agent": "sophie-gateway",
        "webhook-id": o.id,
        "webhook-timestamp": String(timestamp),
        "webhook-signature": signatures.join(" "),
      },
      body: o.body,
    });
  } catch (err) {
    const timedOut = err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError");
    return { ok: false, retry: true, status: null, error: timedOut ? `no answer within ${o.timeoutMs} ms` : "network error" };
  }
  await response.body?.cancel();
  const status = response.status;
  if (status >= 200 && status < 300) return { ok: true, status };
  if (status >= 300 && status < 400) return { ok: false, retry: false, status, error: `redirect (${status}) not followed` };
  return { ok: false, retry: status === 408 || status === 429 || status >= 500, status, error: `receiver answered ${status}` };
}

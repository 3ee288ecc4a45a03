/**
 * Slack (Events API) channel: request signature check, event parsing, and
 * posting one message.
 *
 * Inbound contract:
 * - `verifySlackSignature` implements Slack's v0 scheme:
 *   `X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:{timestamp}:{raw body}")>`
 *   with `X-Slack-Request-Timestamp`. Checks in order, one reason each; never
 *   throws, never echoes the secret or a signature:
 *   `no_secret` (missing, or not 16–256 ASCII letters/digits — a secret with
 *   stray whitespace or quotes fails closed rather than verifying nothing),
 *   `missing_headers` (absent or empty), `timestamp` (not 1–12 ASCII digits,
 *   or more than 300 s from `nowSeconds` either way; a non-finite clock
 *   refuses everything), `signature`. The signature is compared as text
 *   (`v0=` + lower-case hex, exactly as Slack sends it) in constant time after
 *   an equal-length check; the timestamp is signed exactly as received.
 *   The body must be the raw bytes Slack sent, before any JSON parsing.
 * - `parseSlackPayload` reads a verified body: `url_verification` (its
 *   `challenge`, 1–512 characters, to echo back), a `message` from an
 *   `event_callback` whose event is `message` or `app_mention`, or `ignored`
 *   with one reason: `malformed`, `unsupported_type` (other envelope types),
 *   `unsupported_event`, `malformed_event`, `bot_message` (has `bot_id`),
 *   `subtype` (any subtype: edits, deletions, joins, bot messages, …),
 *   `no_user`, `no_text`. `app_mention` events carry no `channel_type`; it is
 *   inferred from the channel id (`D…` → `im`, `G…` → `group`, else
 *   `channel`). Deduplication by `eventId` is the caller's job; note that a
 *   mention in a channel the bot also reads arrives as both a `message` and an
 *   `app_mention` with different event ids but the same `channel` and `ts`.
 *
 * Outbound contract:
 * - `postSlackMessage` calls `chat.postMessage` with a bearer token and
 *   answers a verdict instead of throwing: retry on network errors, HTTP 429
 *   (with `retryAfterSeconds` from `Retry-After`), 5xx, and `ok:false` errors
 *   that mean "later" (`ratelimited`, `internal_error`, …); no retry on other
 *   errors (`channel_not_found`, `not_in_channel`, `invalid_auth`, …), on a
 *   caller's abort, or on a 2xx that is not JSON (it may have been posted).
 *   Error text holds Slack's error code (only if it looks like one) and never
 *   the token or the message text.
 * - Every `text` the gateway sends to Slack (a reply, `message.send`, a job's
 *   report, an approval message and its update, a note to a presser) goes
 *   through `slackEscape` in the function that posts it: model and user text
 *   is mrkdwn to Slack, so `<!channel>`, `<@U…>` or `<https://…|label>` in it
 *   would notify or plant a link (D-081).
 */
import { z } from "zod";
import { postPlatformJson, redactSecret, retryAfterHeader, type SendFailure } from "./telegram";

export const SLACK_TIMESTAMP_TOLERANCE_SECONDS = 300;
/** What a Slack signing secret must look like here (Slack's are 32 hex characters). */
export const SLACK_SIGNING_SECRET = /^[A-Za-z0-9]{16,256}$/;

export type SlackVerdict = { ok: true } | { ok: false; reason: "no_secret" | "missing_headers" | "timestamp" | "signature" };

const hex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

/** Verifies a request's `X-Slack-Signature` against the signing secret, at `nowSeconds`. Never throws. */
export async function verifySlackSignature(
  secret: string | undefined,
  headers: { timestamp: string | null; signature: string | null },
  rawBody: string,
  nowSeconds: number,
): Promise<SlackVerdict> {
  if (typeof secret !== "string" || !SLACK_SIGNING_SECRET.test(secret)) return { ok: false, reason: "no_secret" };
  if (!headers.timestamp || !headers.signature) return { ok: false, reason: "missing_headers" };
  if (!/^\d{1,12}$/.test(headers.timestamp)) return { ok: false, reason: "timestamp" };
  // Written so that a NaN clock fails too.
  if (!(Math.abs(nowSeconds - Number(headers.timestamp)) <= SLACK_TIMESTAMP_TOLERANCE_SECONDS)) return { ok: false, reason: "timestamp" };
  try {
    const encoder = new TextEncoder();
    const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(`v0:${headers.timestamp}:${rawBody}`)));
    const expected = encoder.encode(`v0=${hex(mac)}`);
    const given = encoder.encode(headers.signature);
    if (given.length === expected.length && crypto.subtle.timingSafeEqual(given, expected)) return { ok: true };
  } catch {
    // Unreachable with a valid secret; a verifier answers with a verdict, not an exception.
  }
  return { ok: false, reason: "signature" };
}

// ---------------------------------------------------------------------------
// Inbound payloads

export type SlackPayload =
  | { kind: "url_verification"; challenge: string }
  | {
      kind: "message";
      eventId: string;
      teamId: string;
      channel: string;
      channelType: string;
      user: string;
      text: string;
      ts: string;
      threadTs: string | null;
    }
  | { kind: "ignored"; eventId: string | null; reason: string };

const Id = z.string().min(1).max(255);
const UrlVerification = z.looseObject({ type: z.literal("url_verification"), challenge: z.string().min(1).max(512) });
const EventCallback = z.looseObject({
  type: z.literal("event_callback"),
  event_id: Id,
  team_id: Id,
  event: z.looseObject({ type: z.string() }),
});
const MessageEvent = z.looseObject({
  channel: Id,
  channel_type: z.string().min(1).max(32).optional(),
  ts: Id,
  thread_ts: Id.optional(),
});

function inferChannelType(channel: string): string {
  if (channel.startsWith("D")) return "im";
  if (channel.startsWith("G")) return "group";
  return "channel";
}

/** Reads a verified Events API body. Never throws. */
export function parseSlackPayload(body: unknown): SlackPayload {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return { kind: "ignored", eventId: null, reason: "malformed" };
  const b = body as Record<string, unknown>;
  const eventId = typeof b.event_id === "string" && Id.safeParse(b.event_id).success ? b.event_id : null;
  const ignored = (reason: string): SlackPayload => ({ kind: "ignored", eventId, reason });
  if (b.type === "url_verification") {
    const v = UrlVerification.safeParse(body);
    return v.success ? { kind: "url_verification", challenge: v.data.challenge } : ignored("malformed");
  }
  if (b.type !== "event_callback") return ignored(typeof b.type === "string" ? "unsupported_type" : "malformed");
  const cb = EventCallback.safeParse(body);
  if (!cb.success) return ignored("malformed");
  const event = cb.data.event;
  if (event.type !== "message" && event.type !== "app_mention") return ignored("unsupported_event");
  if (event.bot_id !== undefined && event.bot_id !== null) return ignored("bot_message");
  if (event.subtype !== undefined && event.subtype !== null) return ignored("subtype");
  if (typeof event.user !== "string" || event.user === "") return ignored("no_user");
  if (typeof event.text !== "string" || event.text === "") return ignored("no_text");
  const m = MessageEvent.safeParse(event);
  if (!m.success) return ignored("malformed_event");
  return {
    kind: "message",
    eventId: cb.data.event_id,
    teamId: cb.data.team_id,
    channel: m.data.channel,
    channelType: m.data.channel_type ?? inferChannelType(m.data.channel),
    user: event.user,
    text: event.text,
    ts: m.data.ts,
    threadTs: m.data.thread_ts ?? null,
  };
}

// ---------------------------------------------------------------------------
// Outbound

export type SlackSendResult = { ok: true; messageId: string } | SendFailure;

/**
 * Slack's documented escaping for message text (`&` → `&amp;`, `<` → `&lt;`, `>` → `&gt;`): nothing in the text can
 * become a mention (`<!channel>`, `<!here>`, `<@U…>`), a channel link or a hyperlink; formatting (`*bold*`) stays.
 */
export const slackEscape = (text: string): string => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** `ok:false` errors worth trying again later. */
const RETRYABLE_ERRORS = new Set([
  "ratelimited",
  "rate_limited",
  "internal_error",
  "fatal_error",
  "service_unavailable",
  "request_timeout",
]);

const SlackAnswer = z.looseObject({ ok: z.boolean(), ts: z.string().optional(), error: z.string().optional() });

/** Posts one message (in a thread when `threadTs` is set). Never throws; see the header for retry rules. */
export async function postSlackMessage(o: {
  fetch?: typeof fetch;
  apiBaseUrl: string;
  botToken: string;
  channel: string;
  text: string;
  threadTs: string | null;
  /** Block Kit blocks (issue 24 §2: an approval's buttons); `text` is then the notification's fallback. */
  blocks?: Record<string, unknown>[];
  signal?: AbortSignal;
}): Promise<SlackSendResult> {
  const body: Record<string, unknown> = { channel: o.channel, text: slackEscape(o.text) };
  if (o.threadTs) body.thread_ts = o.threadTs;
  if (o.blocks) body.blocks = o.blocks;
  const posted = await postPlatformJson({
    fetch: o.fetch,
    url: `${o.apiBaseUrl.replace(/\/+$/, "")}/chat.postMessage`,
    body,
    headers: { authorization: `Bearer ${o.botToken}`, "content-type": "application/json; charset=utf-8" },
    signal: o.signal,
  });
  if (!("res" in posted)) return posted;
  const { res, json } = posted;
  if (res.status === 429) {
    const failure: SendFailure = { ok: false, retry: true, status: 429, error: "slack 429: rate limited" };
    const after = retryAfterHeader(res);
    if (after !== undefined) failure.retryAfterSeconds = after;
    return failure;
  }
  if (res.status >= 500) return { ok: false, retry: true, status: res.status, error: `slack ${res.status}` };
  if (!res.ok) return { ok: false, retry: false, status: res.status, error: `slack ${res.status}` };
  const answer = SlackAnswer.safeParse(json); // not JSON (null): an unexpected answer
  if (!answer.success) return { ok: false, retry: false, status: res.status, error: "slack: unexpected response" };
  const a = answer.data;
  if (a.ok && a.ts) return { ok: true, messageId: a.ts };
  if (a.ok) return { ok: false, retry: false, status: res.status, error: "slack: unexpected response" };
  const code = a.error && /^[a-z0-9_]{1,64}$/.test(a.error) ? redactSecret(a.error, o.botToken) : "unknown_error";
  const failure: SendFailure = { ok: false, retry: RETRYABLE_ERRORS.has(code), status: res.status, error: `slack: ${code}` };
  const after = retryAfterHeader(res);
  if (failure.retry && after !== undefined) failure.retryAfterSeconds = after;
  return failure;
}

/**
 * Discord (Interactions endpoint) channel: request signature check, interaction parsing, and sending one
 * follow-up message through the interaction webhook.
 *
 * Inbound contract:
 * - `verifyDiscordSignature` checks `X-Signature-Ed25519` (hex of a 64-byte Ed25519 signature) over
 *   `X-Signature-Timestamp` + the raw body, with the application's public key (64 hex characters). Checks in
 *   order, one reason each; never throws, never echoes the key or a signature: `no_key` (missing or not 64 hex
 *   characters), `missing_headers` (absent or empty), `empty_body`, `timestamp` (not 1–12 ASCII digits, or more
 *   than 300 s from `nowSeconds` either way — the window Slack and Standard Webhooks get; a non-finite clock
 *   refuses everything), `signature` (not exactly 128 hex characters, or not valid). The timestamp is verified
 *   exactly as received; the body must be the raw text Discord sent, before any JSON parsing.
 * - `parseDiscordInteraction` reads a verified body: `ping` (type 1), a `turn` (type 2, an application command
 *   with a string option `message`; type 3, a message component: its `custom_id`, then a select menu's values),
 *   or `ignored` with one reason: `malformed`, `unsupported_type` (autocomplete, modal submits, …),
 *   `no_message` (a command without a non-empty `message` option), `no_user`, `from_bot`, `no_channel`,
 *   `bad_token`. Deduplication by the interaction `id` is the caller's job.
 *
 * Outbound contract:
 * - `sendDiscordFollowup` POSTs `{apiBaseUrl}/webhooks/{application_id}/{interaction_token}` (Discord's
 *   "Create Followup Message", which always answers the message); `postDiscordChannelMessage` POSTs
 *   `{apiBaseUrl}/channels/{channel_id}/messages` with `Authorization: Bot <DISCORD_BOT_TOKEN>` (a scheduled job's
 *   report, issue 24 §1, D-076). Both send mentions disabled, and answer a verdict
 *   instead of throwing: retry on network errors (`status: null`), 429 (with `retryAfterSeconds` from the body's
 *   `retry_after` or `Retry-After`) and 5xx; no retry on other 4xx (an expired token is 401/404), on a caller's
 *   abort, or on a 2xx that is not a message (it may have been posted). The interaction token (a credential for
 *   15 minutes) and the bot token never appear in error text, nor do the URL or the message text.
 */
import { z } from "zod";
import { postPlatformJson, redactSecret, retryAfterHeader, type SendFailure, splitTelegramText } from "./telegram";

export const DISCORD_TIMESTAMP_TOLERANCE_SECONDS = 300;
/** Longest message `content`, in characters. */
export const DISCORD_MESSAGE_LIMIT = 2000;
/** Discord ids (snowflakes): decimal digits. */
export const SNOWFLAKE = /^\d{1,25}$/;
/** An interaction token as it may appear in a URL path (Discord's are base64url-like, a few hundred characters). */
const INTERACTION_TOKEN = /^[A-Za-z0-9_.-]{1,1000}$/;
const HEX = /^[0-9a-fA-F]*$/;

export type DiscordVerifyResult =
  | { ok: true }
  | { ok: false; reason: "no_key" | "missing_headers" | "empty_body" | "timestamp" | "signature" };

function hexBytes(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Whether the interaction request is signed by the application's key (see the header). Never throws. */
export async function verifyDiscordSignature(
  publicKeyHex: string | undefined,
  headers: { signature: string | null; timestamp: string | null },
  rawBody: string,
  nowSeconds: number,
): Promise<DiscordVerifyResult> {
  if (typeof publicKeyHex !== "string" || publicKeyHex.length !== 64 || !HEX.test(publicKeyHex)) return { ok: false, reason: "no_key" };
  const { signature, timestamp } = headers;
  if (!signature || !timestamp) return { ok: false, reason: "missing_headers" };
  if (rawBody === "") return { ok: false, reason: "empty_body" };
  if (!Number.isFinite(nowSeconds) || !/^\d{1,12}$/.test(timestamp)) return { ok: false, reason: "timestamp" };
  if (Math.abs(nowSeconds - Number(timestamp)) > DISCORD_TIMESTAMP_TOLERANCE_SECONDS) return { ok: false, reason: "timestamp" };
  if (signature.length !== 128 || !HEX.test(signature)) return { ok: false, reason: "signature" };
  try {
    const key = await crypto.subtle.importKey("raw", hexBytes(publicKeyHex), { name: "Ed25519" }, false, ["verify"]);
    const valid = await crypto.subtle.verify("Ed25519", key, hexBytes(signature), new TextEncoder().encode(timestamp + rawBody));
    return valid ? { ok: true } : { ok: false, reason: "signature" };
  } catch {
    // A key that is not a curve point, or a runtime without Ed25519: refuse, never throw.
    return { ok: false, reason: "signature" };
  }
}

// ---------------------------------------------------------------------------
// Inbound interactions

export type DiscordInteraction =
  | { kind: "ping"; applicationId: string | null }
  | {
      kind: "turn";
      id: string;
      applicationId: string | null;
      /** Secret for 15 minutes: it authorizes the follow-up. Never log or store it beyond the reply outbox. */
      token: string;
      guildId: string | null;
      channelId: string;
      userId: string;
      text: string;
    }
  | { kind: "ignored"; applicationId: string | null; reason: string };

const Snowflake = z.string().regex(SNOWFLAKE);
const User = z.looseObject({ id: Snowflake, bot: z.boolean().optional() });
const Interaction = z.looseObject({
  id: Snowflake,
  type: z.int(),
  application_id: Snowflake.optional(),
  token: z.string().optional(),
  guild_id: Snowflake.optional(),
  channel_id: Snowflake.optional(),
  channel: z.looseObject({ id: Snowflake }).optional(),
  member: z.looseObject({ user: User.optional() }).optional(),
  user: User.optional(),
  data: z.looseObject({}).optional(),
});
const CommandOption = z.looseObject({ name: z.string(), type: z.int(), value: z.unknown().optional() });
const CommandData = z.looseObject({ options: z.array(CommandOption).optional() });
const ComponentData = z.looseObject({ custom_id: z.string().min(1).max(100), values: z.array(z.string()).max(25).optional() });

/** The text of a turn: a command's `message` option (type 3 = STRING), or a component's id and selected values. */
function turnText(type: number, data: unknown): string | null {
  if (type === 2) {
    const d = CommandData.safeParse(data ?? {});
    const option = d.success ? d.data.options?.find((o) => o.name === "message" && o.type === 3) : undefined;
    return typeof option?.value === "string" && option.value.trim() !== "" ? option.value : null;
  }
  const d = ComponentData.safeParse(data);
  if (!d.success) return null;
  return d.data.values?.length ? `${d.data.custom_id}: ${d.data.values.join(", ")}` : d.data.custom_id;
}

/** Reads one verified interaction. Never throws. */
export function parseDiscordInteraction(body: unknown): DiscordInteraction {
  const parsed = Interaction.safeParse(body);
  if (!parsed.success) return { kind: "ignored", applicationId: null, reason: "malformed" };
  const i = parsed.data;
  const applicationId = i.application_id ?? null;
  const ignored = (reason: string): DiscordInteraction => ({ kind: "ignored", applicationId, reason });
  if (i.type === 1) return { kind: "ping", applicationId };
  if (i.type !== 2 && i.type !== 3) return ignored("unsupported_type");
  const user = i.member?.user ?? i.user;
  if (!user) return ignored("no_user");
  if (user.bot) return ignored("from_bot");
  const channelId = i.channel_id ?? i.channel?.id;
  if (!channelId) return ignored("no_channel");
  if (typeof i.token !== "string" || !INTERACTION_TOKEN.test(i.token)) return ignored("bad_token");
  const text = turnText(i.type, i.data);
  if (text === null) return ignored(i.type === 2 ? "no_message" : "malformed");
  return { kind: "turn", id: i.id, applicationId, token: i.token, guildId: i.guild_id ?? null, channelId, userId: user.id, text };
}

// ---------------------------------------------------------------------------
// Outbound

/** Cuts `text` into follow-ups of at most 2,000 characters (at a newline or space when one is in the window; lossless). */
export function splitDiscordText(text: string): string[] {
  return splitTelegramText(text, DISCORD_MESSAGE_LIMIT);
}

export type DiscordSendResult = { ok: true; messageId: string } | SendFailure;

const DiscordAnswer = z.looseObject({
  id: Snowflake.optional(),
  message: z.string().optional(),
  retry_after: z.number().min(0).optional(),
});

/** Sends one follow-up message (at most 2,000 characters: split first). Never throws; see the header for retry rules. */
export async function sendDiscordFollowup(o: {
  fetch?: typeof fetch;
  apiBaseUrl: string;
  applicationId: string;
  token: string;
  text: string;
  signal?: AbortSignal;
}): Promise<DiscordSendResult> {
  if (!SNOWFLAKE.test(o.applicationId) || !INTERACTION_TOKEN.test(o.token)) {
    return { ok: false, retry: false, status: null, error: "discord: invalid interaction" };
  }
  return postDiscord({
    fetch: o.fetch,
    url: `${o.apiBaseUrl.replace(/\/+$/, "")}/webhooks/${o.applicationId}/${o.token}`,
    text: o.text,
    secret: o.token,
    signal: o.signal,
  });
}

/**
 * Posts one message (at most 2,000 characters: split first) to a channel with the bot token — a scheduled job's
 * report (issue 24 §1). Same verdicts as `sendDiscordFollowup`; the token goes in `Authorization: Bot …` only, and
 * error text never contains it. A 403 (the bot is not in the channel or lacks Send Messages) is not retried.
 */
export async function postDiscordChannelMessage(o: {
  fetch?: typeof fetch;
  apiBaseUrl: string;
  botToken: string;
  channelId: string;
  text: string;
  signal?: AbortSignal;
}): Promise<DiscordSendResult> {
  if (!SNOWFLAKE.test(o.channelId)) return { ok: false, retry: false, status: null, error: "discord: invalid channel id" };
  return postDiscord({
    fetch: o.fetch,
    url: `${o.apiBaseUrl.replace(/\/+$/, "")}/channels/${o.channelId}/messages`,
    headers: { authorization: `Bot ${o.botToken}` },
    text: o.text,
    secret: o.botToken,
    signal: o.signal,
  });
}

/** POSTs `text` as a message with mentions disabled and reads Discord's answer into a verdict (`secret` kept out of errors). */
async function postDiscord(o: {
  fetch?: typeof fetch | undefined;
  url: string;
  headers?: Record<string, string>;
  text: string;
  secret: string;
  signal?: AbortSignal | undefined;
}): Promise<DiscordSendResult> {
  const posted = await postPlatformJson({
    fetch: o.fetch,
    url: o.url,
    ...(o.headers ? { headers: o.headers } : {}),
    // The model's text must never ping @everyone, roles or users.
    body: { content: o.text, allowed_mentions: { parse: [] } },
    signal: o.signal,
  });
  if (!("res" in posted)) return posted;
  const { res, json } = posted;
  const answer = DiscordAnswer.safeParse(json);
  const a = answer.success ? answer.data : null;
  if (res.ok) {
    return a?.id ? { ok: true, messageId: a.id } : { ok: false, retry: false, status: res.status, error: "discord: unexpected response" };
  }
  const detail = a?.message ? `: ${redactSecret(a.message, o.secret)}` : "";
  const failure: SendFailure = {
    ok: false,
    retry: res.status === 429 || res.status >= 500,
    status: res.status,
    error: `discord ${res.status}${detail}`,
  };
  if (res.status === 429) {
    const after = a?.retry_after !== undefined ? Math.ceil(a.retry_after) : retryAfterHeader(res);
    if (after !== undefined) failure.retryAfterSeconds = after;
  }
  return failure;
}

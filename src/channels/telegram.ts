/**
 * Telegram Bot API channel: the pure parts of the webhook (secret check,
 * update parsing), splitting long replies, and sending one message.
 *
 * Inbound contract:
 * - `verifyTelegramSecret` checks `X-Telegram-Bot-Api-Secret-Token` against
 *   the configured secret (the `secret_token` given to `setWebhook`). It fails
 *   closed: no configured secret, or one that breaks Telegram's own rule
 *   (1–256 of `A-Z a-z 0-9 _ -`), refuses every request, as does a missing
 *   header. The comparison is of SHA-256 digests with `timingSafeEqual`, so
 *   neither the content nor the length of the secret leaks through timing.
 * - `parseTelegramUpdate` turns an update into a `message` (a new message
 *   with text — or, failing that, a caption — from a human in a private chat,
 *   group or supergroup) or `ignored` with one reason. It validates loosely
 *   (Telegram adds fields over time) and never throws. Reasons:
 *   `malformed` (not an update), the update's kind for other updates
 *   (`edited_message`, `channel_post`, `callback_query`, … from a fixed list;
 *   anything else is `unsupported_update`), and for messages
 *   `malformed_message`, `unsupported_chat`, `no_sender`, `from_bot`,
 *   `no_text`. Deduplication by `updateId` is the caller's job.
 *
 * Outbound contract:
 * - `splitTelegramText` cuts text into parts of at most 4096 UTF-16 code
 *   units (Telegram's limit after entity parsing; we send plain text). It cuts
 *   after the last newline in the window, else after the last space, else
 *   hard at the limit — a cut after whitespace is taken only if the part has
 *   some non-whitespace before it. It never splits a surrogate pair. The
 *   parts joined give back the input exactly (the whitespace stays at the end
 *   of the earlier part); so a long run of whitespace in the input can still
 *   yield a whitespace-only part, which callers may skip.
 * - `sendTelegramMessage` POSTs `sendMessage` and answers a verdict instead of
 *   throwing: retry on network errors (`status: null`), 429 (with
 *   `retryAfterSeconds` from `parameters.retry_after` or `Retry-After`) and
 *   5xx; no retry on other 4xx, on a caller's abort, or on a 2xx whose body is
 *   not a success (the message may have been delivered; retrying could send it
 *   twice). Error text never contains the URL (it holds the bot token), the
 *   token, or the message text; Telegram's description (its own fixed
 *   phrases such as "Bad Request: chat not found") is included with the token
 *   scrubbed out, on one line, cut to 200 characters.
 */
import { z } from "zod";

/** Telegram's rule for `setWebhook`'s `secret_token`. */
export const TELEGRAM_SECRET = /^[A-Za-z0-9_-]{1,256}$/;
/** Longest `sendMessage` text, in UTF-16 code units. */
export const TELEGRAM_MESSAGE_LIMIT = 4096;

async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

/** Whether the webhook's secret header matches the configured secret. Fails closed; constant time; never throws. */
export async function verifyTelegramSecret(configured: string | undefined, header: string | null): Promise<boolean> {
  if (typeof configured !== "string" || !TELEGRAM_SECRET.test(configured)) return false;
  if (typeof header !== "string") return false;
  try {
    const [a, b] = await Promise.all([sha256(configured), sha256(header)]);
    return a.length === b.length && crypto.subtle.timingSafeEqual(a, b);
  } catch {
    return false;
  }
}

// ---------------------------------------------------------------------------
// Inbound updates

export type TelegramChatType = "private" | "group" | "supergroup";

export type TelegramUpdate =
  | {
      kind: "message";
      updateId: number;
      chatId: string;
      chatType: TelegramChatType;
      fromId: string;
      fromIsBot: boolean;
      text: string;
      messageId: number;
    }
  | { kind: "ignored"; updateId: number | null; reason: string };

/** Update kinds other than `message`, reported as the ignore reason. */
const OTHER_UPDATE_KINDS = [
  "edited_message",
  "channel_post",
  "edited_channel_post",
  "business_connection",
  "business_message",
  "edited_business_message",
  "deleted_business_messages",
  "message_reaction",
  "message_reaction_count",
  "inline_query",
  "chosen_inline_result",
  "callback_query",
  "shipping_query",
  "pre_checkout_query",
  "purchased_paid_media",
  "poll",
  "poll_answer",
  "my_chat_member",
  "chat_member",
  "chat_join_request",
  "chat_boost",
  "removed_chat_boost",
] as const;

const UpdateId = z.int().min(0);
const Update = z.looseObject({ update_id: UpdateId });
const Message = z.looseObject({
  message_id: z.int(),
  chat: z.looseObject({ id: z.int(), type: z.string() }),
  from: z.looseObject({ id: z.int(), is_bot: z.boolean() }).optional(),
  text: z.string().optional(),
  caption: z.string().optional(),
});
const CHAT_TYPES = new Set<string>(["private", "group", "supergroup"]);

/** Reads one webhook update. Never throws. */
export function parseTelegramUpdate(body: unknown): TelegramUpdate {
  const update = Update.safeParse(body);
  if (!update.success) {
    const id = typeof body === "object" && body !== null ? UpdateId.safeParse((body as { update_id?: unknown }).update_id) : null;
    return { kind: "ignored", updateId: id?.success ? id.data : null, reason: "malformed" };
  }
  const updateId = update.data.update_id;
  const ignored = (reason: string): TelegramUpdate => ({ kind: "ignored", updateId, reason });
  if (update.data.message === undefined) {
    return ignored(OTHER_UPDATE_KINDS.find((k) => update.data[k] !== undefined) ?? "unsupported_update");
  }
  const m = Message.safeParse(update.data.message);
  if (!m.success) return ignored("malformed_message");
  const { chat, from } = m.data;
  if (!CHAT_TYPES.has(chat.type)) return ignored("unsupported_chat");
  if (!from) return ignored("no_sender");
  if (from.is_bot) return ignored("from_bot");
  const text = m.data.text || m.data.caption || "";
  if (text === "") return ignored("no_text");
  return {
    kind: "message",
    updateId,
    chatId: String(chat.id),
    chatType: chat.type as TelegramChatType,
    fromId: String(from.id),
    fromIsBot: from.is_bot,
    text,
    messageId: m.data.message_id,
  };
}

/** The bot's user id: the digits before `:` in a token such as `123456:ABC…`, or null when it is not one. */
export function botIdFromToken(token: string): string | null {
  if (typeof token !== "string") return null;
  const m = /^(\d{1,20}):[A-Za-z0-9_-]+$/.exec(token);
  return m ? (m[1] as string) : null;
}

// ---------------------------------------------------------------------------
// Outbound

const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff;
const isLowSurrogate = (code: number) => code >= 0xdc00 && code <= 0xdfff;

/** Cuts `text` into parts of at most `limit` UTF-16 code units (see the header); `limit` below 2 counts as 2. */
export function splitTelegramText(text: string, limit = TELEGRAM_MESSAGE_LIMIT): string[] {
  const max = Number.isFinite(limit) ? Math.max(2, Math.floor(limit)) : TELEGRAM_MESSAGE_LIMIT;
  const parts: string[] = [];
  let rest = text;
  while (rest.length > max) {
    const window = rest.slice(0, max);
    let cut = -1;
    for (const sep of ["\n", " "]) {
      const at = window.lastIndexOf(sep);
      if (at > 0 && /\S/.test(window.slice(0, at))) {
        cut = at + 1;
        break;
      }
    }
    if (cut < 0) {
      cut = max;
      if (isHighSurrogate(rest.charCodeAt(cut - 1)) && isLowSurrogate(rest.charCodeAt(cut))) cut -= 1;
    }
    parts.push(rest.slice(0, cut));
    rest = rest.slice(cut);
  }
  if (rest.length > 0) parts.push(rest);
  return parts;
}

/** Why a send failed, and whether trying again later may succeed. */
export type SendFailure = { ok: false; retry: boolean; status: number | null; retryAfterSeconds?: number; error: string };
export type TelegramSendResult = { ok: true; messageId: number } | SendFailure;

const MAX_ERROR_DETAIL = 200;

/** `text` without any occurrence of `secret`, flattened to one line and cut to 200 characters (for error text). */
export function redactSecret(text: string, secret: string): string {
  const clean = secret ? text.split(secret).join("[redacted]") : text;
  return clean.replace(/\s+/g, " ").slice(0, MAX_ERROR_DETAIL);
}

/** `Retry-After` in seconds, when it is a number of seconds (HTTP dates are ignored). */
export function retryAfterHeader(res: Response): number | undefined {
  const v = res.headers.get("retry-after")?.trim();
  return v && /^\d{1,6}$/.test(v) ? Number(v) : undefined;
}

const TelegramAnswer = z.looseObject({
  ok: z.boolean(),
  result: z.looseObject({ message_id: z.int() }).optional(),
  error_code: z.int().optional(),
  description: z.string().optional(),
  parameters: z.looseObject({ retry_after: z.int().min(0).optional() }).optional(),
});

const errorName = (x: unknown): string =>
  typeof x === "object" && x !== null && typeof (x as { name?: unknown }).name === "string" ? (x as { name: string }).name : "";

/** A failure for an error `fetch` threw: a caller's abort is final, a timeout or network error may be retried. Never includes the error's message (it may hold the URL). */
function networkFailure(err: unknown, signal: AbortSignal | undefined): SendFailure {
  if (signal?.aborted) {
    const timeout = errorName(signal.reason) === "TimeoutError";
    return { ok: false, retry: timeout, status: null, error: timeout ? "timed out" : "aborted" };
  }
  if (errorName(err) === "TimeoutError") return { ok: false, retry: true, status: null, error: "timed out" };
  return { ok: false, retry: true, status: null, error: "network error" };
}

/** A platform's answer to a POST: its response and its body read as JSON (null when it is not JSON). */
export interface PlatformAnswer {
  res: Response;
  json: unknown;
}

/**
 * POSTs `body` as JSON to a chat platform and reads its answer (Telegram, Slack, Discord share it). Never throws: an
 * error `fetch` threw is a failure (`networkFailure`); a body that is not JSON (a proxy's error page) reads as null,
 * to be judged by the status alone.
 */
export async function postPlatformJson(o: {
  fetch?: typeof fetch;
  url: string;
  body: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
}): Promise<PlatformAnswer | SendFailure> {
  let res: Response;
  let raw: string;
  try {
    res = await (o.fetch ?? fetch)(o.url, {
      method: "POST",
      headers: { "content-type": "application/json", ...o.headers },
      body: JSON.stringify(o.body),
      signal: o.signal,
    });
    raw = await res.text();
  } catch (err) {
    return networkFailure(err, o.signal);
  }
  try {
    return { res, json: JSON.parse(raw) };
  } catch {
    return { res, json: null };
  }
}

/** Sends one text message (at most 4096 code units: split first). Never throws; see the header for retry rules. */
export async function sendTelegramMessage(o: {
  fetch?: typeof fetch;
  apiBaseUrl: string;
  botToken: string;
  chatId: string;
  text: string;
  replyTo?: number;
  /** An inline keyboard (issue 24 §2: an approval's buttons). */
  replyMarkup?: Record<string, unknown>;
  signal?: AbortSignal;
}): Promise<TelegramSendResult> {
  const body: Record<string, unknown> = { chat_id: o.chatId, text: o.text };
  if (o.replyTo !== undefined) body.reply_parameters = { message_id: o.replyTo, allow_sending_without_reply: true };
  if (o.replyMarkup) body.reply_markup = o.replyMarkup;
  const url = `${o.apiBaseUrl.replace(/\/+$/, "")}/bot${o.botToken}/sendMessage`;
  const posted = await postPlatformJson({ fetch: o.fetch, url, body, signal: o.signal });
  if (!("res" in posted)) return posted;
  const { res, json } = posted;
  const answer = TelegramAnswer.safeParse(json);
  const a = answer.success ? answer.data : null;
  if (res.ok && a?.ok === true && a.result) return { ok: true, messageId: a.result.message_id };
  const code = res.ok ? (a?.error_code ?? res.status) : res.status;
  const detail = a?.description ? `: ${redactSecret(a.description, o.botToken)}` : "";
  if (res.ok && a?.ok !== false) return { ok: false, retry: false, status: res.status, error: "telegram: unexpected response" };
  const failure: SendFailure = { ok: false, retry: code === 429 || code >= 500, status: res.status, error: `telegram ${code}${detail}` };
  if (code === 429) {
    const after = a?.parameters?.retry_after ?? retryAfterHeader(res);
    if (after !== undefined) failure.retryAfterSeconds = after;
  }
  return failure;
}

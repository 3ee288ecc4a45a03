/**
 * Telegram's side of approvals from inside a chat (issue 24 §2, D-075): reading a `callback_query` update (a press of
 * an inline keyboard button), answering it (`answerCallbackQuery`, which stops the client's spinner and may show the
 * presser a short note) and editing the approval message to its outcome (`editMessageText`, without the keyboard).
 * Like `sendTelegramMessage`, the calls answer a verdict and never throw; error text never holds the bot token.
 */
import { z } from "zod";
import { looksLikeButton } from "./approval-buttons";
import { postPlatformJson, redactSecret, type SendFailure } from "./telegram";

/** A press of one of our buttons, as read from a verified update. */
export interface TelegramPress {
  updateId: number;
  queryId: string;
  fromId: string;
  username: string | null;
  chatId: string;
  messageId: number;
  /** The button's `callback_data`, as sent (validated by the caller). */
  data: string;
}

const CallbackUpdate = z.looseObject({
  update_id: z.int().min(0),
  callback_query: z.looseObject({
    id: z.string().min(1).max(128),
    from: z.looseObject({ id: z.int(), is_bot: z.boolean(), username: z.string().optional() }),
    message: z.looseObject({ message_id: z.int(), chat: z.looseObject({ id: z.int() }) }).optional(),
    data: z.string().optional(),
  }),
});

/**
 * The press in `body` when it is a `callback_query` whose data claims to be an approval button (`apv1:…`) on a
 * message in a chat, from a person; null for anything else (other updates go on to `parseTelegramUpdate`).
 */
export function parseTelegramPress(body: unknown): TelegramPress | null {
  const u = CallbackUpdate.safeParse(body);
  if (!u.success) return null;
  const q = u.data.callback_query;
  if (!q.message || q.from.is_bot || !looksLikeButton(q.data)) return null;
  return {
    updateId: u.data.update_id,
    queryId: q.id,
    fromId: String(q.from.id),
    username: q.from.username ?? null,
    chatId: String(q.message.chat.id),
    messageId: q.message.message_id,
    data: q.data as string,
  };
}

/** Where and with what a Bot API call goes. */
interface BotCall {
  fetch?: typeof fetch;
  apiBaseUrl: string;
  botToken: string;
  signal?: AbortSignal;
}

/** One Bot API method call that answers `{ok: true, result}`; a verdict, never a throw. */
async function callBot(o: BotCall, method: string, body: Record<string, unknown>): Promise<{ ok: true } | SendFailure> {
  const url = `${o.apiBaseUrl.replace(/\/+$/, "")}/bot${o.botToken}/${method}`;
  const posted = await postPlatformJson({ fetch: o.fetch, url, body, signal: o.signal });
  if (!("res" in posted)) return posted;
  const answer = posted.json as { ok?: unknown; description?: unknown } | null;
  if (posted.res.ok && answer?.ok === true) return { ok: true };
  const detail = typeof answer?.description === "string" ? `: ${redactSecret(answer.description, o.botToken)}` : "";
  const status = posted.res.status;
  return { ok: false, retry: status === 429 || status >= 500, status, error: `telegram ${method} ${status}${detail}` };
}

/** Answers a press (the note is at most 200 characters; `alert` shows it as a dialog rather than a toast). */
export function answerCallbackQuery(o: BotCall & { queryId: string; text: string; alert?: boolean }): Promise<{ ok: true } | SendFailure> {
  return callBot(o, "answerCallbackQuery", { callback_query_id: o.queryId, text: o.text.slice(0, 200), show_alert: o.alert === true });
}

/** Replaces a message's text; without `replyMarkup` its inline keyboard goes too. */
export function editMessageText(
  o: BotCall & { chatId: string; messageId: number; text: string; replyMarkup?: Record<string, unknown> },
): Promise<{ ok: true } | SendFailure> {
  return callBot(o, "editMessageText", {
    chat_id: o.chatId,
    message_id: o.messageId,
    text: o.text.slice(0, 4096),
    ...(o.replyMarkup ? { reply_markup: o.replyMarkup } : {}),
  });
}

/**
 * Slack's side of approvals from inside a chat (issue 24 §2, D-075): reading an interactivity payload (a
 * `block_actions` press of one of the approval message's buttons, sent form-encoded as `payload=<json>` to the
 * interactivity request URL, signed like events), updating the approval message to its outcome (`chat.update`, with
 * the buttons removed) and telling a refused presser why (`chat.postEphemeral`, seen only by them). Both calls go to
 * the configured `apiBaseUrl` with the bot token, so the token stays bound to its origin (issue 20 §5) — unlike
 * `response_url`, a URL taken from the payload. Verdicts, never throws; error text never holds the token.
 */
import { z } from "zod";
import { looksLikeButton } from "./approval-buttons";
import { slackEscape } from "./slack";
import { postPlatformJson, redactSecret, type SendFailure } from "./telegram";

/** A press of one of our buttons, as read from a verified payload. */
export interface SlackPress {
  teamId: string;
  userId: string;
  username: string | null;
  channelId: string;
  messageTs: string;
  /** Unique per interaction: what a redelivery shares. */
  triggerId: string;
  data: string;
}

const Id = z.string().min(1).max(255);
const BlockActions = z.looseObject({
  type: z.literal("block_actions"),
  user: z.looseObject({ id: Id, username: z.string().optional() }),
  team: z.looseObject({ id: Id }).nullish(),
  channel: z.looseObject({ id: Id }),
  container: z.looseObject({ message_ts: Id }),
  trigger_id: Id.optional(),
  actions: z.array(z.looseObject({ action_id: z.string(), value: z.string().optional(), action_ts: z.string().optional() })).min(1),
});

/** What a verified interactivity body holds: our press, something else (acknowledged), or not a payload (400). */
export type SlackInteraction = { kind: "press"; press: SlackPress } | { kind: "ignored" } | { kind: "malformed"; error: string };

/** Reads a verified form-encoded interactivity body. Never throws. */
export function parseSlackInteraction(raw: string): SlackInteraction {
  const payload = new URLSearchParams(raw).get("payload");
  if (payload === null) return { kind: "malformed", error: "the body has no payload= field" };
  let body: unknown;
  try {
    body = JSON.parse(payload);
  } catch {
    return { kind: "malformed", error: "the payload is not JSON" };
  }
  const p = BlockActions.safeParse(body);
  if (!p.success) return { kind: "ignored" }; // view submissions, shortcuts, other messages' actions
  const action = p.data.actions[0];
  if (!action || !looksLikeButton(action.value)) return { kind: "ignored" };
  return {
    kind: "press",
    press: {
      teamId: p.data.team?.id ?? "",
      userId: p.data.user.id,
      username: p.data.user.username ?? null,
      channelId: p.data.channel.id,
      messageTs: p.data.container.message_ts,
      triggerId: p.data.trigger_id ?? `${p.data.container.message_ts}:${action.action_ts ?? ""}`,
      data: action.value as string,
    },
  };
}

interface WebCall {
  fetch?: typeof fetch;
  apiBaseUrl: string;
  botToken: string;
  signal?: AbortSignal;
}

/** One Web API call answering `{ok: true}`; a verdict, never a throw. */
async function callSlack(o: WebCall, method: string, body: Record<string, unknown>): Promise<{ ok: true } | SendFailure> {
  const posted = await postPlatformJson({
    fetch: o.fetch,
    url: `${o.apiBaseUrl.replace(/\/+$/, "")}/${method}`,
    body,
    headers: { authorization: `Bearer ${o.botToken}`, "content-type": "application/json; charset=utf-8" },
    signal: o.signal,
  });
  if (!("res" in posted)) return posted;
  const answer = posted.json as { ok?: unknown; error?: unknown } | null;
  if (posted.res.ok && answer?.ok === true) return { ok: true };
  const code = typeof answer?.error === "string" && /^[a-z0-9_]{1,64}$/.test(answer.error) ? redactSecret(answer.error, o.botToken) : "";
  const status = posted.res.status;
  return { ok: false, retry: status === 429 || status >= 500, status, error: `slack ${method} ${status}${code ? `: ${code}` : ""}` };
}

/** Replaces a message (`text`, escaped here, is the notification fallback; `blocks` what is shown). */
export function updateSlackMessage(
  o: WebCall & { channel: string; ts: string; text: string; blocks: Record<string, unknown>[] },
): Promise<{ ok: true } | SendFailure> {
  return callSlack(o, "chat.update", { channel: o.channel, ts: o.ts, text: slackEscape(o.text), blocks: o.blocks });
}

/** A note only `user` sees, in `channel`. */
export function postSlackEphemeral(o: WebCall & { channel: string; user: string; text: string }): Promise<{ ok: true } | SendFailure> {
  return callSlack(o, "chat.postEphemeral", { channel: o.channel, user: o.user, text: slackEscape(o.text) });
}

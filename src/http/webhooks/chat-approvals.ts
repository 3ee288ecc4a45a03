/**
 * Approvals decided from inside a chat (issue 24 §2, D-075):
 *   Telegram `callback_query` updates on POST /webhooks/telegram/{agent_id} (same secret-token check)
 *   POST /webhooks/slack/{agent_id}/interactivity   Slack `block_actions`, form-encoded, v0 signature (±5 minutes)
 *
 * A press decides only when every check holds, in this order, and changes nothing otherwise (the presser is told
 * why): the presser is on the agent's approver list for that channel (`agents.<id>.approvers`); the button's token
 * is one the gateway issued (its SHA-256 is in D1) for this agent, this channel and this chat; the approval's buttons
 * were not used yet and the approval has not expired; the press claims the buttons (one D1 statement: of concurrent
 * presses exactly one does). It then decides through the SessionDO's `decideApproval` — the very call the admin API
 * makes, with `telegram:<user id>` / `slack:<user id>` as the decider — so the run resumes exactly as after an admin
 * decision. A redelivered press (same Telegram update, same Slack trigger) is acknowledged and does nothing again.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { claimButtons, findButton } from "../../channels/approval-button-store";
import {
  type ChatDecision,
  deciderLabel,
  outcomeLine,
  parseButtonData,
  promptText,
  slackBlocks,
  tokenDigest,
} from "../../channels/approval-buttons";
import { parseSlackInteraction, postSlackEphemeral, type SlackPress, updateSlackMessage } from "../../channels/slack-interactivity";
import { answerCallbackQuery, editMessageText, type TelegramPress } from "../../channels/telegram-callbacks";
import { GatewayError } from "../../errors";
import { type ApprovalRow, approvalObjectId } from "../../runs/approvals";
import { forgetBacklog } from "../../runs/backlog";
import { secretValuesFromEnv } from "../../security/redact";
import type { SessionDO } from "../../sessions/SessionDO";
import { type AppEnv, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { agentFor, verifiedSlackBody } from "./inbound";
import { channelToken } from "./sender-gate";

/** One press, whichever the platform. */
interface Press {
  channel: "telegram" | "slack";
  agentId: string;
  userId: string;
  chatId: string;
  /** The platform delivery (a redelivery carries the same). */
  event: string;
  data: string;
}

/** What a press came to. */
type PressOutcome =
  | { kind: "decided"; decision: ChatDecision; approval: ApprovalRow }
  | { kind: "refused"; reason: string; text: string }
  | { kind: "duplicate" };

const NOTHING = "nothing changed";
const refused = (reason: string, text: string): PressOutcome => ({ kind: "refused", reason, text });
const INVALID = refused("invalid", `This button is not valid (not one this gateway issued for this chat); ${NOTHING}.`);
const EXPIRED = refused("expired", `This approval has expired; ${NOTHING}. The call was not run.`);

/** The checks and the decision (see the header); never throws for a refusal. */
async function decidePress(c: Context<AppEnv>, p: Press): Promise<PressOutcome> {
  const approvers = c.get("config").agents[p.agentId]?.approvers?.[p.channel] ?? [];
  if (!approvers.includes(p.userId)) return refused("not_approver", `You are not on this agent's approver list; ${NOTHING}.`);
  const token = parseButtonData(p.data);
  if (!token) return INVALID;
  const db = c.env.DB;
  const button = await findButton(db, await tokenDigest(token));
  if (!button || button.agent_id !== p.agentId || button.channel !== p.channel || button.chat_id !== p.chatId) return INVALID;
  const already = (by: string | null) =>
    refused("used", `This approval was already decided${by ? ` (its buttons were used by ${by})` : ""}; ${NOTHING}.`);
  if (button.used_at !== null) return button.used_event === p.event ? { kind: "duplicate" } : already(button.used_by);
  const now = new Date();
  if (Date.parse(button.expires_at) <= now.getTime()) return EXPIRED;
  const by = `${p.channel}:${p.userId}`;
  if (!(await claimButtons(db, button.approval_id, by, p.event, now))) {
    const again = await findButton(db, await tokenDigest(token));
    return again?.used_event === p.event ? { kind: "duplicate" } : already(again?.used_by ?? null);
  }
  return decideInSession(c, button.approval_id, button.decision, by);
}

/** The admin API's own decision call, on the SessionDO that holds the approval. */
async function decideInSession(c: Context<AppEnv>, approvalId: string, decision: ChatDecision, by: string): Promise<PressOutcome> {
  const objectId = approvalObjectId(approvalId);
  if (!objectId) return INVALID;
  let result: Awaited<ReturnType<SessionDO["decideApproval"]>>;
  try {
    const stub = c.env.SESSIONS.get(c.env.SESSIONS.idFromString(objectId));
    result = (await stub.decideApproval(approvalId, decision, by, null)) as typeof result;
  } catch {
    return refused("error", "The decision could not be recorded; ask an operator to decide it in the dashboard.");
  }
  forgetBacklog(); // this isolate's early backlog check sees the decision at once (src/runs/backlog.ts)
  if (result.ok) return { kind: "decided", decision, approval: result.approval };
  if (result.reason === "expired") return EXPIRED;
  if (result.reason === "not_found") return INVALID;
  const { status, decided_by } = result.approval ?? { status: "decided", decided_by: null };
  return refused("decided", `This approval was already ${status} by ${decided_by ?? "someone"}; ${NOTHING}.`);
}

/** `decidePress`, with its one log line. */
async function pressOutcome(c: Context<AppEnv>, p: Press): Promise<PressOutcome> {
  const outcome = await decidePress(c, p);
  c.get("logger").log("info", "approval.chat.press", {
    channel: p.channel,
    agent_id: p.agentId,
    outcome: outcome.kind,
    ...(outcome.kind === "refused" ? { reason: outcome.reason } : {}),
    ...(outcome.kind === "decided" ? { approval_id: outcome.approval.id } : {}),
  });
  return outcome;
}

/** The approval message once decided: its request, then the outcome and who decided. */
function decidedText(c: Context<AppEnv>, o: { decision: ChatDecision; approval: ApprovalRow }, username: string | null): string {
  const asked = promptText(o.approval, secretValuesFromEnv(c.env));
  return `${asked}\n\n${outcomeLine(o.decision, deciderLabel(o.approval.decided_by ?? "", username))}`;
}

const TOAST: Record<ChatDecision, string> = { approve: "Approved. The run continues.", deny: "Denied. The call will not run." };

/** A Telegram press: decided → the note and the edited message; refused → the note, as an alert. */
export async function telegramPress(c: Context<AppEnv>, agentId: string, press: TelegramPress): Promise<Response> {
  const outcome = await pressOutcome(c, {
    channel: "telegram",
    agentId,
    userId: press.fromId,
    chatId: press.chatId,
    event: `telegram:${press.updateId}`,
    data: press.data,
  });
  if (outcome.kind === "duplicate") return c.json({ ok: true, ignored: true }, 200);
  const apiBaseUrl = c.get("config").channels.telegram.apiBaseUrl;
  const botToken = channelToken(c, "TELEGRAM_BOT_TOKEN", apiBaseUrl);
  if (!botToken) return c.json({ ok: true }, 200); // withheld or missing: decided (or not) all the same, nothing to say it with
  const call = { apiBaseUrl, botToken, signal: AbortSignal.timeout(5_000) };
  if (outcome.kind === "refused") {
    await answerCallbackQuery({ ...call, queryId: press.queryId, text: outcome.text, alert: true });
    return c.json({ ok: true }, 200);
  }
  await answerCallbackQuery({ ...call, queryId: press.queryId, text: TOAST[outcome.decision] });
  const edited = await editMessageText({
    ...call,
    chatId: press.chatId,
    messageId: press.messageId,
    text: decidedText(c, outcome, press.username),
  });
  if (!edited.ok) c.get("logger").log("warn", "approval.chat.answer_failed", { channel: "telegram", error: edited.error });
  return c.json({ ok: true }, 200);
}

/** A Slack press: decided → the message updated; refused → an ephemeral note to the presser. */
async function slackPress(c: Context<AppEnv>, agentId: string, press: SlackPress): Promise<void> {
  const outcome = await pressOutcome(c, {
    channel: "slack",
    agentId,
    userId: press.userId,
    chatId: press.channelId,
    event: `slack:${press.triggerId}`,
    data: press.data,
  });
  if (outcome.kind === "duplicate") return;
  const apiBaseUrl = c.get("config").channels.slack.apiBaseUrl;
  const botToken = channelToken(c, "SLACK_BOT_TOKEN", apiBaseUrl);
  if (!botToken) return;
  const call = { apiBaseUrl, botToken, signal: AbortSignal.timeout(5_000) };
  if (outcome.kind === "refused") {
    await postSlackEphemeral({ ...call, channel: press.channelId, user: press.userId, text: outcome.text });
    return;
  }
  const text = decidedText(c, outcome, null);
  const updated = await updateSlackMessage({
    ...call,
    channel: press.channelId,
    ts: press.messageTs,
    text, // escaped by updateSlackMessage, like every text sent to Slack (D-081)
    blocks: slackBlocks(text, null),
  });
  if (!updated.ok) c.get("logger").log("warn", "approval.chat.answer_failed", { channel: "slack", error: updated.error });
}

const json = (schema: z.ZodType) => ({ "application/json": { schema } });

const interactivityRoute = createRoute({
  method: "post",
  path: "/slack/{agent_id}/interactivity",
  summary: "Slack interactivity request URL: Approve / Deny button presses (block_actions, v0 signature)",
  description:
    "Form-encoded `payload=<json>` as Slack sends it, verified with `SLACK_SIGNING_SECRET` over the raw body (timestamp within ±5 minutes). " +
    "A press of an approval button decides the approval when the presser is on `agents.<id>.approvers.slack` and the button's token is valid, unused and unexpired (issue 24 §2, docs/channels.md). " +
    "Every verified payload is acknowledged with 200; the outcome is shown in Slack (the message updated, or a note only the presser sees).",
  request: { params: z.object({ agent_id: z.string() }) },
  responses: {
    200: {
      description: "Acknowledged (decided, refused with a note to the presser, or ignored)",
      content: json(z.object({ ok: z.boolean(), ignored: z.boolean().optional() })),
    },
    400: { description: "A verified body that is not `payload=<json>`", content: json(ErrorEnvelope) },
    401: { description: "Not verified (bad, stale or missing signature, or a missing secret)", content: json(ErrorEnvelope) },
    404: { description: "Channel not enabled, or unknown agent", content: json(ErrorEnvelope) },
  },
});

/** Adds the Slack interactivity route to the channel webhooks' router. */
export function slackInteractivityRoute(app: OpenAPIHono<AppEnv>): void {
  app.openapi(interactivityRoute, (async (c: Context<AppEnv>) => {
    const agentId = agentFor(c, "slack");
    const raw = await verifiedSlackBody(c);
    const interaction = parseSlackInteraction(raw);
    if (interaction.kind === "malformed") throw new GatewayError("invalid.request", interaction.error);
    if (interaction.kind === "ignored") return c.json({ ok: true, ignored: true }, 200);
    await slackPress(c, agentId, interaction.press);
    return c.json({ ok: true }, 200);
  }) as never);
}

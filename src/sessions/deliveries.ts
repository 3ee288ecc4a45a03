/**
 * Outbound deliveries of finished runs, as capabilities shipped from the alarm: job notifications (S3 §4 notify)
 * and chat channel replies (issue 10), each retried from its outbox until delivered or given up, each audited in
 * the session's stream.
 */
import { deliverApprovalPrompts } from "../channels/approval-prompts";
import { deliverReplies, nextReplyAt } from "../channels/replies";
import { deliverNotifications, nextNotifyAt } from "../scheduler/notify";
import { secretValuesFromEnv } from "../security/redact";
import type { AlarmCapability } from "./capabilities";
import type { SessionContext } from "./context";
import { runRecord } from "./run-queries";
import { enqueueSessionAudit } from "./session-audit";

/**
 * What both outboxes need: storage, env, secrets to redact, the session's audit stream as `actor`, and a run's S3 view
 * (an API caller's completion webhook posts it, issue 24 §5).
 */
function deliveryHost(cx: SessionContext, actor: string) {
  return {
    sql: cx.sql,
    storage: cx.storage,
    env: cx.env,
    secrets: secretValuesFromEnv(cx.env),
    audit: (eventType: string, runId: string, payload: Record<string, unknown>) =>
      enqueueSessionAudit(cx, eventType, actor, payload, runId),
    runView: (runId: string) => runRecord(cx.sql, runId)?.view ?? null,
  };
}

/** Capability: sends the notifications of finished job runs (reported to D1) and API callers' completion webhooks. */
export function jobNotifications(cx: SessionContext): AlarmCapability {
  return {
    name: "job-notifications",
    expedite: true,
    nextAlarmAt: (now) => nextNotifyAt(cx.sql, now),
    onAlarm: () => deliverNotifications(deliveryHost(cx, "scheduler")),
  };
}

/**
 * Capability: sends a finished run's final answer back to the chat channel it came from, once — and an approval's
 * Approve / Deny message to the chat whose run waits for it (issue 24 §2, rows of the same outbox).
 */
export function channelReplies(cx: SessionContext): AlarmCapability {
  return {
    name: "channel-replies",
    expedite: true,
    nextAlarmAt: () => nextReplyAt(cx.sql),
    onAlarm: async () => {
      const host = deliveryHost(cx, "system");
      await deliverReplies(host);
      await deliverApprovalPrompts(host);
    },
  };
}

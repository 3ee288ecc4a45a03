/**
 * Recording a budget alert the run-stop D1 batch claimed (issue 25 §2, D-078): one `usage.alert` audit event in this
 * session's stream and, when the alert has a webhook, one signed webhook through the job notifications' outbox — in
 * one transaction, once: a marker in `session_meta` keeps a claim read back twice (the batch sent again after a lost
 * answer, or by a listing and a pass at once) from being recorded twice. Other objects never get the claim (D1's key).
 */
import { alertWebhookIdFor, enqueueAlertNotify } from "../scheduler/alert-notify";
import { usdOfPico } from "../usage/cost";
import type { FiredAlert } from "../usage/ship";
import type { SessionContext } from "./context";
import { enqueueSessionAudit } from "./session-audit";
import { metaValue, setMeta } from "./session-store";

/** What an alert reports: which alert, the period and its totals when it fired, and the run whose usage crossed it. */
function alertPayload(f: FiredAlert): Record<string, unknown> {
  const a = f.alert;
  return {
    alert: {
      scope: a.scope,
      id: a.id,
      period: a.period,
      ...(a.configured.costUsd !== undefined ? { cost_usd: a.configured.costUsd } : {}),
      ...(a.configured.tokens !== undefined ? { tokens: a.configured.tokens } : {}),
    },
    period: f.period,
    tokens: f.tokens,
    cost_usd: usdOfPico(f.costPico),
    run_id: f.runId,
  };
}

/** Records each fired alert once (audit event, webhook row); true when a webhook was queued (the alarm should send it). */
export async function recordFiredAlerts(cx: SessionContext, fired: readonly FiredAlert[]): Promise<boolean> {
  if (fired.length === 0) return false;
  const ids = await Promise.all(fired.map((f) => alertWebhookIdFor(f.alert.key, f.period)));
  let queued = false;
  cx.storage.transactionSync(() => {
    fired.forEach((f, i) => {
      const marker = `usage_alert:${ids[i]}`;
      if (metaValue(cx.sql, marker) !== undefined) return;
      setMeta(cx.sql, marker, new Date().toISOString());
      const payload = alertPayload(f);
      enqueueSessionAudit(cx, "usage.alert", "system", payload, f.runId);
      const hook = f.alert.webhook;
      if (!hook) return;
      const body = JSON.stringify({ type: "usage.alert", timestamp: new Date().toISOString(), data: payload });
      enqueueAlertNotify(cx.sql, { ...hook, webhookId: ids[i] as string, body, period: f.period, runId: f.runId });
      queued = true;
    });
  });
  return queued;
}

/**
 * Budget alerts (issue 25 §2, D-078), the parts that need no storage: which configured alerts a run carries in its
 * spec (its agent's, and its caller's), and which claims its usage row asks for in the run-stop D1 batch.
 */
import type { GatewayConfig, UsageAlert } from "../config/schema";
import type { RunIndexRow, RunUsageColumns } from "../runs/index-d1";
import { picoOfUsd } from "./cost";
import type { AlertClaim } from "./store";

export type { AlertClaim };

/** An alert as a run carries it: its stable key, what it counts, the threshold in pico-USD or tokens, its webhook. */
export interface AlertSpec {
  key: string;
  scope: "agent" | "caller";
  id: string;
  period: "day" | "month";
  metric: "cost" | "tokens";
  threshold: number;
  /** What the alert said in config (`costUsd` or `tokens`), for the audit event and the webhook. */
  configured: { costUsd?: number; tokens?: number };
  webhook?: { url: string; maxAttempts: number; retryBaseMs: number; timeoutMs: number };
}

/**
 * An alert's key: what it watches and its threshold, so an alert whose threshold changes is a new alert (it may fire
 * again in the same period), while the same alert fires once per period across config versions.
 */
function alertKey(a: UsageAlert): string {
  return [a.scope, a.id, a.period, a.costUsd !== undefined ? `usd:${a.costUsd}` : `tokens:${a.tokens}`].join("|");
}

/** The alerts a run of `agentId` may fire: the agent's own and every caller-scope one (narrowed per turn: `alertsForCaller`). */
export function alertSpecs(config: GatewayConfig, agentId: string): AlertSpec[] {
  const notify = config.scheduler.notify;
  return config.usage.alerts
    .filter((a) => a.scope === "caller" || a.id === agentId)
    .map((a) => ({
      key: alertKey(a),
      scope: a.scope,
      id: a.id,
      period: a.period,
      metric: a.costUsd !== undefined ? "cost" : "tokens",
      threshold: a.costUsd !== undefined ? picoOfUsd(a.costUsd) : (a.tokens ?? 0),
      configured: a.costUsd !== undefined ? { costUsd: a.costUsd } : { tokens: a.tokens ?? 0 },
      ...(a.webhook ? { webhook: { url: a.webhook, ...notify } } : {}),
    }));
}

/** The alerts of `specs` that watch this run: its agent's, and those of `callerKey`. */
export function alertsForCaller(specs: readonly AlertSpec[] | undefined, callerKey: string): AlertSpec[] {
  return (specs ?? []).filter((a) => a.scope === "agent" || a.id === callerKey);
}

/** The claims a run's usage asks for: each alert watching it, for the period its usage falls in (its creation's day). */
export function alertClaims(
  alerts: readonly AlertSpec[] | undefined,
  run: Pick<RunIndexRow, "run_id" | "agent_id" | "created_at">,
  usage: Pick<RunUsageColumns, "caller">,
): (AlertClaim & { alert: AlertSpec })[] {
  const day = run.created_at.slice(0, 10);
  return (alerts ?? [])
    .filter((a) => (a.scope === "agent" ? a.id === run.agent_id : a.id === usage.caller))
    .map((a) => ({
      alert: a,
      key: a.key,
      scope: a.scope,
      scopeId: a.id,
      period: a.period === "day" ? day : day.slice(0, 7),
      metric: a.metric,
      threshold: a.threshold,
      claimant: run.run_id,
    }));
}

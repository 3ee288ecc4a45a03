/**
 * Who a run's per-caller limits count against (issue 20 §4): pending approvals
 * (`tools.policy.approvals.maxPendingPerCaller`) and tokens (`agents.<id>.budget.tokensPerCallerPerDay`).
 * - API runs (POST /v1/runs, /v1/chat/messages, /v1/chat/completions): `api:<caller id>`, the caller of the token.
 * - Channel runs: `<channel>:<account>:<sender>` — the person who wrote the message (Telegram `telegram:<bot>:<from
 *   id>`, Slack `slack:<team>:<user>`, Standard Webhooks `standard:<room>:<user_id>`), so one chatty group member
 *   cannot use up the limits of the rest of the group, nor of the API callers.
 * - Job runs: `job:<job id>` — each scheduled job is its own caller.
 * - Setup sessions an admin starts (POST /api/admin/setup-sessions): `admin`.
 * - Anything else (admin-scope chat, sandbox callbacks, runs queued before this existed): `agent:<agent id>`.
 * The prefixes keep the kinds apart: API caller ids cannot contain `:`.
 */
import type { RunSpec } from "./spec";

/** The caller key of an API caller. */
export function apiCallerKey(callerId: string): string {
  return `api:${callerId}`;
}

/** The caller key of a channel message's sender. */
export function channelCallerKey(channel: string, account: string, sender: string): string {
  return `${channel}:${account}:${sender}`;
}

/** The caller key of a scheduled job. */
export function jobCallerKey(jobId: string): string {
  return `job:${jobId}`;
}

/** The caller key of a request by `callerId` (null: not an API caller) on `agentId`. */
export function requestCallerKey(callerId: string | null | undefined, agentId: string): string {
  return callerId ? apiCallerKey(callerId) : `agent:${agentId}`;
}

/** The caller key a run counts against: the one its spec names, else its API caller, else the agent's own. */
export function runCallerKey(spec: Pick<RunSpec, "agentId" | "caller">, run: { caller_id: string | null }): string {
  return spec.caller ?? requestCallerKey(run.caller_id, spec.agentId);
}

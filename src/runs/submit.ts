/**
 * Submitting a turn: the one way a message becomes a queued run, whoever sends it — an API caller
 * (`POST /v1/chat/messages`, `POST /v1/runs`, `POST /v1/chat/completions`), a chat channel's webhook
 * (Telegram, Slack, Standard Webhooks), the scheduler's firing of a job, or an admin's setup session.
 *
 * Each door decides *where* the turn runs (its session key), *who* it counts against and what comes with it
 * (a dispatch key, a reply target, a job and its notification); this module does what every door did the same way:
 *   1. refuse early when the agent, or that caller on it, has too many approvals waiting (only the doors that
 *      asked for it: API callers and admins; channel senders and jobs are held to the limits when their approval
 *      is indexed, as before — src/runs/caller.ts);
 *   2. resolve the run spec from the configuration in force (src/runs/spec.ts), with the door's overrides;
 *   3. hand the message to the session's Durable Object in one RPC: `enqueueMessage`, or `enqueueAndAwait` when
 *      the door will wait for the answer (`Prefer: wait`, the OpenAI-compatible door).
 * Issue 23 changes how a turn runs (inline in the enqueue call): that change is made here and in the SessionDO,
 * not in each door.
 */

import type { ReplyTarget } from "../channels/replies";
import type { GatewayConfig } from "../config/schema";
import { GatewayError } from "../errors";
import type { NotifySpec } from "../scheduler/notify";
import { formatSessionKey, type SessionKey, sessionObjectName } from "../sessions/keys";
import type { SessionDO } from "../sessions/SessionDO";
import { alertsForCaller } from "../usage/alerts";
import { type Admission, backlogClock, giveSlotBack, noteAdmitted, pendingBacklog } from "./backlog";
import { requestCallerKey } from "./caller";
import { type ConfigRef, cachedRunSpec, type RunSpec } from "./spec";
import { type KeyBudget, keyTokensUsed, utcDay } from "./token-budget";

/** What a turn is submitted with: the bindings it reaches and the configuration it is accepted under. */
export interface SubmitContext {
  env: { SESSIONS: DurableObjectNamespace<SessionDO>; DB?: D1Database };
  config: GatewayConfig;
  /** Which configuration that is (recorded in `run.created`); absent in tests with a fixed config. */
  configRef?: ConfigRef;
}

/** One turn, as a door describes it. The agent must exist in the configuration (each door answers otherwise itself). */
export interface Turn {
  agentId: string;
  /** The session the turn runs in, or how to find it: a lookup runs only once the early refusals have passed. */
  session: SessionKey | (() => Promise<SessionKey>);
  /** S5 session type of a session this turn creates (absent: the object's default, `ordinary`). */
  sessionType?: "ordinary" | "setup";
  message: string;
  /** Who sent it, as the run records it: `http`, `openai`, `telegram`, `job`, `admin`… */
  source: string;
  /** The channel the run spec is resolved for (L3 of the prompt): `http`, `openai`, a chat channel, `job`. */
  channel: string;
  /** The API caller that owns the run (it alone reads it back at /v1/runs/{run_id}). */
  callerId?: string;
  /** Who the per-caller limits count against, when not the run's API caller (src/runs/caller.ts). */
  callerKey?: string;
  /** Issue 25 §1: the API key record's daily token budget (reserved before each model call; spent → 429 before queueing). */
  keyBudget?: KeyBudget;
  /** Refuse with 429 before queueing when the agent, or this caller key on it, has too many approvals waiting. */
  refuseWhenBacklogged?: { callerKey: string };
  /** L5 task mode: `automation` for a scheduled job's run. */
  task?: RunSpec["task"];
  /** Makes the submission idempotent: the same key returns the run queued first (`duplicate: true`). */
  dispatchKey?: string;
  /** A scheduled firing (recorded in `run.created`) and its notification, queued with the run. */
  job?: { jobId: string; scheduledFor: string; missed: number };
  notify?: NotifySpec | null;
  /** A chat channel's reply target: the run's final answer goes back there once. */
  reply?: ReplyTarget;
  /** Wait up to `ms` for the run to end (or, `untilPaused`, to stop for an approval) in the same call. */
  wait?: { ms: number; untilPaused?: boolean };
}

type Queued = Awaited<ReturnType<SessionDO["enqueueMessage"]>>;
type Done = Awaited<ReturnType<SessionDO["awaitRun"]>>;

/** A submitted turn: the session object it went to, its key, the queued run and, when the door waited, how it ended. */
export interface Submitted {
  session: DurableObjectStub<SessionDO>;
  sessionKey: string;
  queued: Queued;
  /** Present only when `wait` was given: null if the run was not found, else its state when the wait ended. */
  done?: Done;
  /** The early backlog check's admission of the turn: a door that waits longer hands it to `runEnded` (D-069). */
  admission?: Admission;
}

/**
 * A door saw the turn's run stop: a run that completed went past every approval it asked for, and one with no tool
 * call asked for none, so its backlog slot comes back in this isolate's copy (D-069; once, whoever calls). A paused
 * run, or one that ended otherwise after a tool call, keeps it until the copy is read again.
 */
export function runEnded(submitted: Pick<Submitted, "admission">, done: Done | null | undefined): void {
  if (!submitted.admission || !done?.finished) return;
  runViewEnded(submitted.admission, done.view);
}

/** `runEnded` for a door that saw the run's final view itself (the WebSocket route, which follows its events). */
export function runViewEnded(admission: Admission, view: { status: string; tool_calls: number }): void {
  if (view.status === "completed" || view.tool_calls === 0) giveSlotBack(admission);
}

/** Submits `turn`: the early refusals, the run spec, then one call to the session's Durable Object. */
export async function submitTurn(ctx: SubmitContext, turn: Turn): Promise<Submitted> {
  const { env, config } = ctx;
  const agent = config.agents[turn.agentId];
  if (!agent) throw new Error(`unknown agent "${turn.agentId}"`); // each door answers an unknown agent before this
  if (turn.keyBudget && env.DB) await refuseWhenKeyBudgetSpent(env.DB, turn.keyBudget, new Date());
  let admission: Admission | null = null;
  if (turn.refuseWhenBacklogged && env.DB) {
    const approvals = config.tools.policy.approvals;
    admission = await refuseWhenApprovalsBacklogged(env.DB, turn.agentId, approvals.maxPendingPerAgent, {
      key: turn.refuseWhenBacklogged.callerKey,
      maxPending: approvals.maxPendingPerCaller,
    });
  }
  const key = typeof turn.session === "function" ? await turn.session() : turn.session;
  const sessionKey = formatSessionKey(key);
  const session = env.SESSIONS.getByName(sessionObjectName(key));
  const identity = { sessionKey, agentId: turn.agentId, ...(turn.sessionType ? { sessionType: turn.sessionType } : {}) };
  const input = {
    message: turn.message,
    source: turn.source,
    limits: agent.session,
    spec: runSpecOf(ctx, turn),
    ...(turn.callerId !== undefined ? { callerId: turn.callerId } : {}),
    ...(turn.dispatchKey !== undefined ? { dispatchKey: turn.dispatchKey } : {}),
    ...(turn.job ? { job: turn.job } : {}),
    ...(turn.notify !== undefined ? { notify: turn.notify } : {}),
    ...(turn.reply ? { reply: turn.reply } : {}),
  };
  const admitted = admission ? { admission } : {};
  if (!turn.wait) return { session, sessionKey, queued: await session.enqueueMessage(identity, input), ...admitted };
  // Queued and awaited in one call to the object: one round trip per turn, not two (issue 12).
  const { queued, done } = turn.wait.untilPaused
    ? await session.enqueueAndAwait(identity, input, turn.wait.ms, { untilPaused: true })
    : await session.enqueueAndAwait(identity, input, turn.wait.ms);
  const submitted = { session, sessionKey, queued, done: done as Done, ...admitted };
  runEnded(submitted, submitted.done);
  return submitted;
}

/** The run spec of `turn`: the agent's, under the configuration in force, with the door's caller and task. */
function runSpecOf(ctx: SubmitContext, turn: Turn): RunSpec {
  const spec = cachedRunSpec(ctx.config, turn.agentId, turn.channel, ctx.configRef);
  return {
    ...spec,
    // Issue 25 §2: a run carries only the alerts that watch it (its agent's, its own caller's), not every caller's.
    ...(spec.usageAlerts
      ? { usageAlerts: alertsForCaller(spec.usageAlerts, turn.callerKey ?? requestCallerKey(turn.callerId, turn.agentId)) }
      : {}),
    ...(turn.task ? { task: turn.task } : {}),
    ...(turn.callerKey !== undefined ? { caller: turn.callerKey } : {}),
    ...(turn.keyBudget ? { keyBudget: turn.keyBudget } : {}),
  };
}

/** Seconds from `now` to the next UTC midnight, when every daily token budget starts again. */
export function secondsToUtcMidnight(now: Date): number {
  const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return Math.max(1, Math.ceil((next - now.getTime()) / 1000));
}

/**
 * Issue 25 §1: a key whose daily tokens are spent is answered 429 `over_budget` (with `Retry-After`: the seconds to
 * UTC midnight) before anything is queued. The early answer, not the guarantee: the reservation before each model
 * call is (src/runs/token-budget.ts). One D1 read per turn, only for keys that have a budget.
 */
async function refuseWhenKeyBudgetSpent(db: D1Database, key: KeyBudget, now: Date): Promise<void> {
  const day = utcDay(now);
  const used = await keyTokensUsed(db, key.keyId, day);
  if (used >= key.tokensPerDay)
    throw new GatewayError("over_budget", `key ${key.keyId} has used ${used} of its ${key.tokensPerDay} tokens for ${day} (UTC)`, {
      retryAfterSeconds: secondsToUtcMidnight(now),
    });
}

/**
 * DESIGN "Approvals": too many pending → 429. While an agent has `tools.policy.approvals.maxPendingPerAgent`
 * approvals waiting for a human, new runs of that agent are refused (`rate.limited`, with a retry hint)
 * rather than queued behind a backlog nobody is clearing. Issue 20 §4: the same per caller
 * (`maxPendingPerCaller`, src/runs/caller.ts), so one caller's backlog refuses that caller only.
 *
 * This check is the early answer, not the guarantee: requests racing past it are held to the limits when
 * their approval is indexed (`reserveApprovalSlot`, one atomic D1 statement; the call is then refused).
 * The counts come from this isolate's copy while it serves (src/runs/backlog.ts, D-055), else from D1. Answers
 * the admission (null when the check could not run), for `runEnded`.
 */
export async function refuseWhenApprovalsBacklogged(
  db: D1Database,
  agentId: string,
  maxPending: number,
  caller?: { key: string; maxPending: number },
  now = backlogClock.now(),
): Promise<Admission | null> {
  let pending: { agent: number; caller: number };
  const key = caller?.key ?? "";
  try {
    pending = await pendingBacklog(db, agentId, key, { agent: maxPending, caller: caller?.maxPending ?? Number.POSITIVE_INFINITY }, now);
  } catch {
    return null; // the index is unavailable: the early check cannot run; the atomic one at approval time still holds
  }
  if (pending.agent >= maxPending)
    throw new GatewayError(
      "rate.limited",
      `agent "${agentId}" has ${pending.agent} tool calls waiting for approval (limit ${maxPending}); decide them at /api/admin/approvals first`,
      { retryAfterSeconds: 60 },
    );
  if (caller && pending.caller >= caller.maxPending)
    throw new GatewayError(
      "rate.limited",
      `caller "${caller.key}" has ${pending.caller} tool calls waiting for approval on agent "${agentId}" (limit ${caller.maxPending} per caller); wait until an admin decides them`,
      { retryAfterSeconds: 60 },
    );
  return noteAdmitted(agentId, key);
}

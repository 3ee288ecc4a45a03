/**
 * Taking a message in: the user message is redacted (secrets in force, and fragments of a secret split over
 * earlier messages) and stored with its queued run, its `run.created` event and audit, and any job notification
 * or channel reply target, in one transaction. A dispatch key makes it idempotent. Issue 23: the run then starts
 * inline (run-capabilities.ts `startRuns`), and nothing that waits on I/O may fall between this transaction and
 * the run's model request, so that both are one commit (T1): the D1 index refresh and the run's D1 reads are
 * done before it; only the transcript limits (an R2 put, rarely) follow it.
 */
import { auditFromRunEvent } from "../audit/event";
import { enqueueAudit } from "../audit/outbox";
import { enqueueReply, type ReplyTarget } from "../channels/replies";
import { mintRunId } from "../runs/ids";
import type { RunSpec } from "../runs/spec";
import { appendEvent } from "../runs/store";
import { enqueueNotify, type NotifySpec } from "../scheduler/notify";
import { redactText, secretValuesFromEnv } from "../security/redact";
import type { SessionContext } from "./context";
import { insertQueuedRun, runByDispatchKey } from "./session-runs-store";
import { ensureSession, refreshIndex, type SessionIdentity, type SessionRef, startSessionListing } from "./session-state";
import { applySplitRewrites, archivedLookback, redactSplitSecrets, type SplitRewrite } from "./split-secrets";
import { appendMessage } from "./transcript";
import { enforceLimits, type SessionLimitsInput } from "./transcript-limits";

/** A message to queue a run for. */
export interface EnqueueInput {
  message: string;
  source: string;
  limits: SessionLimitsInput;
  spec?: RunSpec;
  callerId?: string;
  dispatchKey?: string;
  job?: { jobId: string; scheduledFor: string; missed: number };
  notify?: NotifySpec | null;
  /** A chat channel's reply target: the run's final answer goes back there once (issue 10). */
  reply?: ReplyTarget;
}

/** The run queued for a message (`duplicate`: queued earlier under the same dispatch key). */
export interface Enqueued {
  runId: string;
  sessionId: string;
  seq: number;
  duplicate?: boolean;
}

/** The run queued earlier under `dispatchKey`, if any. */
function byDispatchKey(cx: SessionContext, dispatchKey: string): Enqueued | undefined {
  const row = runByDispatchKey(cx.sql, dispatchKey);
  return row ? { runId: row.id, sessionId: row.session_id, seq: row.message_seq, duplicate: true } : undefined;
}

/** Stores the redacted message, its queued run, `run.created` and its audit, notification and reply target; one transaction. */
function storeQueuedRun(
  cx: SessionContext,
  state: SessionRef,
  input: EnqueueInput,
  message: { text: string; rewrites: readonly SplitRewrite[] },
  runId: string,
  onStored?: (runId: string) => void,
): number {
  const now = new Date();
  const secrets = secretValuesFromEnv(cx.env);
  return cx.storage.transactionSync(() => {
    applySplitRewrites(cx.sql, message.rewrites);
    const redactions = message.text === input.message ? [] : ["content"];
    const row = appendMessage(cx.sql, { session_id: state.sessionId, role: "user", content: message.text, run_id: runId, redactions }, now);
    insertQueuedRun(cx.sql, {
      id: runId,
      sessionId: state.sessionId,
      source: input.source,
      agentId: state.agentId,
      callerId: input.callerId ?? null,
      messageSeq: row.seq,
      spec: input.spec ? JSON.stringify(input.spec) : null,
      at: now.toISOString(),
      dispatchKey: input.dispatchKey ?? null,
    });
    if (input.notify) enqueueNotify(cx.sql, runId, input.notify);
    if (input.reply) enqueueReply(cx.sql, runId, input.reply);
    const created = appendEvent(cx.sql, { id: runId, agent_id: state.agentId }, "run.created", createdPayload(state, input, row.seq), now);
    const actor = input.callerId ? `api:${input.callerId}` : input.job ? "scheduler" : "system";
    enqueueAudit(cx.sql, auditFromRunEvent(created, actor, secrets));
    onStored?.(runId);
    return row.seq;
  });
}

/** The `run.created` payload: where the message is, which model, which configuration, which job firing. */
function createdPayload(state: SessionRef, input: EnqueueInput, seq: number): Record<string, unknown> {
  return {
    source: input.source,
    session_id: state.sessionId,
    message_seq: seq,
    provider: input.spec?.model.providerId ?? null,
    model: input.spec?.model.modelId ?? null,
    // Which configuration the run was accepted under: an operator can fetch that version afterwards.
    ...(input.spec?.config ? { config: input.spec.config } : {}),
    ...(input.job ? { job_id: input.job.jobId, scheduled_for: input.job.scheduledFor, missed: input.job.missed } : {}),
    // Issue 24 §5: where an API caller asked the run's completion webhook to go (the URL only; it is signed, not keyed).
    ...(input.notify?.channel === "run" ? { notify_url: input.notify.target } : {}),
  };
}

/**
 * Stores a user message (redacted before it is written) and queues a run for it; the caller then starts it
 * inline. `dispatchKey` makes the call idempotent: a second call with the same key returns the first run
 * (`duplicate: true`) and stores nothing. The scheduler passes a firing's run key, with the firing (recorded in
 * `run.created`) and its notification, queued in the same transaction as the run. `prefetch` makes the run's
 * own reads before anything is written (see the module comment); `onStored` runs inside the storing transaction
 * (the engine starts an inline run there: issue 23's T1 is one commit fewer).
 */
export async function enqueueMessage(
  cx: SessionContext,
  identity: SessionIdentity,
  input: EnqueueInput,
  prefetch?: (runId: string) => Promise<void>,
  onStored?: (runId: string) => void,
): Promise<Enqueued> {
  await cx.refreshSecrets(); // the message is redacted with every secret in force, stored ones included
  const state = await ensureSession(cx, identity, "background"); // the caller awaits sessionListed before answering
  try {
    return await storeMessage(cx, state, input, prefetch, onStored);
  } catch (err) {
    startSessionListing(cx); // the session exists all the same: listed now (a failure leaves its rows queued)
    throw err;
  }
}

/** enqueueMessage once the session exists: refused early as a duplicate, or stored (see there). */
async function storeMessage(
  cx: SessionContext,
  state: SessionRef,
  input: EnqueueInput,
  prefetch?: (runId: string) => Promise<void>,
  onStored?: (runId: string) => void,
): Promise<Enqueued> {
  await refreshIndex(cx, state.sessionKey, state.sessionId);
  const known = () => (input.dispatchKey ? byDispatchKey(cx, input.dispatchKey) : undefined);
  const early = known();
  if (early) return early;
  const runId = mintRunId(cx.objectId);
  await prefetch?.(runId);
  const secrets = secretValuesFromEnv(cx.env);
  // A secret may have been split across this message and the previous user messages (issue 20 §5).
  const archived = await archivedLookback(cx.sql, cx.env.AUDIT, state.sessionId, "user", secrets);
  const split = redactSplitSecrets(cx.sql, state.sessionId, "user", redactText(input.message, secrets), secrets, archived);
  // Checked again with nothing awaited before the store: a call with the same key may have stored it meanwhile.
  const seen = known();
  if (seen) return seen;
  const seq = storeQueuedRun(cx, state, input, split, runId, onStored);
  await enforceLimits(cx, state, input.limits);
  return { runId, sessionId: state.sessionId, seq };
}

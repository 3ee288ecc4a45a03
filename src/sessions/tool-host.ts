/**
 * What the session offers the gateway-mediated S5 tools (`verify`, `save_snapshot`, `automation.complete`, …):
 * the checkpoint, recording a run's completion, and audit events in the session's stream.
 */
import { getRun } from "../runs/store";
import type { AutomationCompletion, SessionToolHost } from "../tools/registry";
import { checkpointOf } from "./checkpoint";
import type { SessionContext } from "./context";
import { enqueueSessionAudit } from "./session-audit";
import { automationCompletion, insertAutomationCompletion } from "./session-runs-store";
import { currentSession, sessionType } from "./session-state";

type CompletionAnswer = ReturnType<SessionToolHost["recordCompletion"]>;

/** Records `automation.complete` once per completion id; with `ownRun`, only run `runId` may be completed. */
function recordCompletion(
  cx: SessionContext,
  c: Omit<AutomationCompletion, "recorded_at">,
  runId: string | null,
  ownRun: boolean,
): CompletionAnswer {
  if (ownRun && c.run_id !== runId) return { status: "other_run" };
  const existing = automationCompletion(cx.sql, c.completion_id);
  if (existing) {
    const same = existing.run_id === c.run_id && existing.outcome === c.outcome && existing.summary === c.summary;
    return { status: same ? "duplicate" : "conflict", completion: { ...existing } };
  }
  if (!getRun(cx.sql, c.run_id)) return { status: "unknown_run" };
  const completion: AutomationCompletion = { ...c, recorded_at: new Date().toISOString() };
  cx.storage.transactionSync(() => {
    insertAutomationCompletion(cx.sql, completion);
    enqueueSessionAudit(cx, "automation.completed", "tool", { ...completion }, c.run_id);
  });
  return { status: "recorded", completion };
}

/**
 * What this session offers S5 tools for a call of `runId` (null: a callback outside any run). `ownRun`: the call
 * is the run's own tool call, so `automation.complete` may finish only that run (issue 21 §1).
 */
export function sessionToolHost(cx: SessionContext, runId: string | null, ownRun = false): SessionToolHost {
  const session = currentSession(cx);
  return {
    sessionId: session.sessionId,
    sessionType: sessionType(cx),
    runId,
    checkpoint: () => {
      const c = checkpointOf(cx, session.sessionId);
      const updated_ts = c.revision === 0 ? null : new Date(c.updated_ts * 1000).toISOString();
      return { state: c.state, revision: c.revision, updated_ts, recent_messages: c.recent_messages, trace_tail: c.trace_tail };
    },
    recordCompletion: (c) => recordCompletion(cx, c, runId, ownRun),
    audit: (eventType, payload) => {
      cx.storage.transactionSync(() => enqueueSessionAudit(cx, eventType, "tool", payload, runId ?? undefined));
    },
  };
}

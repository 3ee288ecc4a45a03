/**
 * The session as the run engine sees it (`RunHost`): the session's identity, history, memory, NOTES, transcript,
 * manifests, capabilities, S5 tool host and inline L2, and where each lifecycle event goes (the audit outbox, in
 * the same transaction, and any caller long-polling the run).
 */
import { auditFromRunEvent } from "../audit/event";
import { enqueueAudit } from "../audit/outbox";
import { chatApprovalPrompt } from "../channels/approval-prompts";
import { archiveLogSink } from "../observability/r2-logs";
import { RunLogger } from "../observability/run-lines";
import type { RunHost } from "../runs/engine";
import { secretValuesFromEnv } from "../security/redact";
import { applyReplyNotes, grantedCapabilities } from "./checkpoint";
import type { SessionContext } from "./context";
import { retrieveMemory, runHistory } from "./history";
import { parseSessionKey } from "./keys";
import { recordManifest } from "./manifests";
import { DEFAULT_RETRIEVAL } from "./memory";
import type { RunWaiters } from "./run-waiters";
import { currentSession, sessionType } from "./session-state";
import { applySplitRewrites, redactSplitSecrets } from "./split-secrets";
import { inlinePrompt } from "./system-prompt";
import { sessionToolHost } from "./tool-host";
import { appendMessage } from "./transcript";

/**
 * An assistant reply with the fragments of a secret split over replies redacted; earlier replies rewritten
 * unless `apply` is false (the debug log's look at a reply before it is stored).
 */
function redactSplitReply(cx: SessionContext, content: string, apply = true): string {
  const split = redactSplitSecrets(cx.sql, currentSession(cx).sessionId, "assistant", content, secretValuesFromEnv(cx.env));
  if (apply) applySplitRewrites(cx.sql, split.rewrites);
  return split.text;
}

/** The session's channel: a scoped key's channel, else `main`. */
function channelOf(cx: SessionContext): string {
  const parsed = parseSessionKey(currentSession(cx).sessionKey);
  return parsed.ok && parsed.key.kind === "scoped" ? parsed.key.channel : "main";
}

/** The run engine's view of session `cx`; lifecycle events wake `waiters`. */
export function createRunHost(cx: SessionContext, waiters: RunWaiters): RunHost {
  return {
    sql: cx.sql,
    storage: cx.storage,
    env: cx.env,
    logger: new RunLogger(archiveLogSink(cx.env.AUDIT)),
    session: () => currentSession(cx),
    history: (o) => runHistory(cx, o),
    retrieveMemory: (query, bounds) => retrieveMemory(cx, query, bounds ?? DEFAULT_RETRIEVAL),
    applyNotes: async (reply) => {
      const r = await applyReplyNotes(cx, currentSession(cx), reply);
      return { visible: r.visible, traces: r.traces };
    },
    appendTranscript: (m) =>
      appendMessage(
        cx.sql,
        {
          session_id: currentSession(cx).sessionId,
          role: m.role,
          content: m.content,
          run_id: m.runId,
          tool_name: m.toolName ?? null,
          tool_call_id: m.toolCallId ?? null,
        },
        new Date(),
      ).seq,
    redactSplitReply: (content, apply) => redactSplitReply(cx, content, apply),
    recordManifest: (turnId, manifest) => {
      recordManifest(cx.sql, turnId, manifest, new Date());
    },
    onEvent: (event, actor) => {
      enqueueAudit(cx.sql, auditFromRunEvent(event, actor, secretValuesFromEnv(cx.env)));
      waiters.wake(event.run_id);
    },
    wake: (runId) => waiters.wake(runId),
    objectId: () => cx.objectId,
    channel: () => channelOf(cx),
    capabilities: () => grantedCapabilities(cx),
    sessionType: () => sessionType(cx),
    toolHost: (runId) => sessionToolHost(cx, runId, true),
    inlineRole: () => inlinePrompt(cx, currentSession(cx).sessionId)?.text,
    chatApprovalPrompt: (runId) => chatApprovalPrompt({ sql: cx.sql, secrets: secretValuesFromEnv(cx.env) }, runId),
  };
}

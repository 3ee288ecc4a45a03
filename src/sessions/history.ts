/**
 * History and compaction for model turns (S3 §6 caps, S1 §1.5 budget, S1 §5.3 compaction), and the turn's memory
 * retrieval (S4 §5): stored summaries plus the newest transcript rows after them, bounded so the per-turn cost
 * does not grow with the transcript. A summary made while building a history is stored as memory and archived to
 * R2 (create-only); the transcript itself is kept.
 */
import { type ModelWindow, OverBudgetError } from "../context/budget";
import type { ContextCaps, ContextMessage } from "../context/caps";
import { compact } from "../context/compaction";
import { collectRecentRows, prepareHistory, summaryTokensInL6 } from "../context/history";
import type { RunSpec } from "../runs/spec";
import { secretValuesFromEnv } from "../security/redact";
import { putCreateOnly, summaryArchiveKey } from "./archive";
import type { SessionContext } from "./context";
import { latestSummary, type MemoryItem, type RetrievalBounds, type RetrievedMemory, remember, retrieveForTurn } from "./memory";
import { currentSession, ensureSession, type SessionIdentity, type SessionRef } from "./session-state";
import { firstSeq, historyPage, listMessages } from "./transcript";

/** Turns kept verbatim by compaction (S1 §5.3 "last N turns"). */
export const DEFAULT_KEEP_TURNS = 4;
/** The most transcript rows read to compact at once: the cost does not grow with the transcript. */
const HISTORY_WINDOW = 400;

/** A history for the next model turn, or `over_budget` when even the compacted history cannot fit. */
export type HistoryResult =
  | { ok: true; messages: ContextMessage[]; summaries: string[]; estimatedTokens: number; historyTokens: number }
  | { ok: false; error: "over_budget"; estimatedTokens: number; inputBudget: number };

/** What shapes a history: the model's window, the tokens already taken, the caps, and where it ends. */
export interface HistoryOptions {
  window: ModelWindow;
  fixedTokens: number;
  keepTurns?: number;
  caps?: ContextCaps;
  beforeSeq?: number;
}

/** The newest stored compaction summary of generation `sessionId`. */
function latestSummaryOf(cx: SessionContext, sessionId: string): MemoryItem | undefined {
  return latestSummary(cx.sql, firstSeq(cx.sql, sessionId) ?? 0);
}

/** Stores a compaction summary (a derived artifact with evidence pointers) as memory and archives it to R2. */
async function storeSummary(
  cx: SessionContext,
  ref: SessionRef,
  summary: { fromSeq: number; toSeq: number; evidence: [number, number][]; text: string },
): Promise<MemoryItem> {
  const item = await remember(
    cx.sql,
    { kind: "summary", text: summary.text, from_seq: summary.fromSeq, to_seq: summary.toSeq },
    new Date(),
  );
  const key = summaryArchiveKey(ref.agentId, ref.sessionKey, ref.sessionId, summary.fromSeq, summary.toSeq);
  const body = `${JSON.stringify({ id: item.id, session_id: ref.sessionId, from_seq: summary.fromSeq, to_seq: summary.toSeq, evidence: summary.evidence, text: summary.text })}\n`;
  try {
    await putCreateOnly(cx.env.AUDIT, key, body);
  } catch {
    // The summary is derived and kept in the object; the archive copy is written again by the next compaction.
  }
  return item;
}

/**
 * The history for the next model turn: stored summaries plus the newest rows after them (before `beforeSeq`),
 * compacted if needed. `over_budget` when even the compacted history cannot fit — the caller must not call the model.
 */
export async function buildHistory(cx: SessionContext, ref: SessionRef, o: HistoryOptions): Promise<HistoryResult> {
  const previous = latestSummaryOf(cx, ref.sessionId);
  const after = previous?.to_seq ?? 0;
  const limitSeq = o.beforeSeq ?? Number.MAX_SAFE_INTEGER;
  // Only as many of the newest rows as the context can use, page by page: per-turn cost does not grow with the transcript.
  const rows = collectRecentRows(
    (beforeSeq, limit) => historyPage(cx.sql, ref.sessionId, after, Math.min(beforeSeq, limitSeq), limit),
    o.caps,
  );
  const summaries = previous ? [previous.text] : [];
  const summaryTokens = summaries.reduce((n, t) => n + summaryTokensInL6(t), 0);
  let prepared: ReturnType<typeof prepareHistory>;
  try {
    prepared = prepareHistory(rows, {
      window: o.window,
      fixedTokens: o.fixedTokens + summaryTokens,
      keepTurns: o.keepTurns ?? DEFAULT_KEEP_TURNS,
      ...(o.caps ? { caps: o.caps } : {}),
    });
  } catch (err) {
    if (err instanceof OverBudgetError)
      return { ok: false, error: "over_budget", estimatedTokens: err.estimatedInputTokens, inputBudget: err.inputBudget };
    throw err;
  }
  if (prepared.summary) {
    await storeSummary(cx, ref, prepared.summary);
    summaries.push(prepared.summary.text);
  }
  return {
    ok: true,
    messages: prepared.messages,
    summaries,
    estimatedTokens: prepared.estimatedTokens,
    historyTokens: prepared.historyTokens,
  };
}

/** The history for one of this session's runs: turns before its message (the run engine's `history`). */
export async function runHistory(cx: SessionContext, o: { beforeSeq: number; spec: RunSpec; fixedTokens: number }) {
  const r = await buildHistory(cx, currentSession(cx), {
    window: o.spec.model,
    fixedTokens: o.fixedTokens,
    caps: o.spec.caps,
    beforeSeq: o.beforeSeq,
  });
  if (!r.ok) return { ok: false as const, estimatedTokens: r.estimatedTokens, inputBudget: r.inputBudget };
  return { ok: true as const, messages: r.messages, summaries: r.summaries, tokens: r.historyTokens };
}

/** Compacts now (the model's condense actions): everything but the last `keepTurns` turns becomes a summary. */
export async function compactNow(
  cx: SessionContext,
  identity: SessionIdentity,
  keepTurns = DEFAULT_KEEP_TURNS,
): Promise<MemoryItem | null> {
  const ref = await ensureSession(cx, identity);
  const previous = latestSummaryOf(cx, ref.sessionId);
  const rows = listMessages(cx.sql, ref.sessionId, previous?.to_seq ?? 0, HISTORY_WINDOW);
  const { summary } = compact(rows, keepTurns);
  return summary ? storeSummary(cx, ref, summary) : null;
}

/**
 * A run's retrieval (S4 §5): the best memory items for its user message, redacted with every secret in force;
 * the compaction summary the history puts in L6 is left out (the model would read it twice).
 */
export function retrieveMemory(cx: SessionContext, query: string, bounds: RetrievalBounds): RetrievedMemory | null {
  const summary = latestSummaryOf(cx, currentSession(cx).sessionId);
  return retrieveForTurn(cx.sql, query, bounds, secretValuesFromEnv(cx.env), summary ? [summary.id] : []);
}

/**
 * From transcript to model context for one turn: S3 §6 caps, then the
 * model's token budget (S1 §1.5); on overflow, compaction (older turns → a
 * summary with evidence pointers, the last N turns verbatim); still over →
 * `OverBudgetError`, before any network call.
 */

import { l6ContextBlock } from "../prompts/assemble";
import { inputBudget, MESSAGE_OVERHEAD_TOKENS, type ModelWindow, OverBudgetError } from "./budget";
import {
  buildContext,
  type ContextCaps,
  type ContextMessage,
  DEFAULT_CONTEXT_CAPS,
  sameCaps,
  type TranscriptEntry,
  toMessage,
} from "./caps";
import { type CompactableRow, type CompactionSummary, compact } from "./compaction";
import { estimateTokens } from "./tokens";

export interface HistoryRow extends CompactableRow {
  tool_call_id?: string | null;
  /** The row's stored estimate (`rowTokens`, written with the row); null or absent: not stored yet. */
  tokens?: number | null;
}

export interface PreparedHistory {
  messages: ContextMessage[];
  summary: CompactionSummary | null;
  estimatedTokens: number;
  /** The estimated tokens of `messages` alone (message overhead included). */
  historyTokens: number;
}

/** A stored tool row's content is JSON `{summary?, error?, output?}`; anything else counts as output. */
function toEntry(row: HistoryRow): TranscriptEntry {
  if (row.role !== "tool") return { role: row.role, content: row.content };
  let fields: { summary?: string; error?: string; output?: string } = { output: row.content };
  try {
    const parsed = JSON.parse(row.content) as Record<string, unknown>;
    if (parsed && typeof parsed === "object") {
      fields = {};
      for (const key of ["summary", "error", "output"] as const) {
        const v = parsed[key];
        if (v !== undefined && v !== null) fields[key] = typeof v === "string" ? v : JSON.stringify(v);
      }
    }
  } catch {
    /* plain text output */
  }
  return { role: "tool", toolName: row.tool_name ?? "tool", toolCallId: row.tool_call_id ?? `seq-${row.seq}`, ...fields };
}

export interface PrepareOptions {
  window: ModelWindow;
  /** Tokens of everything else in the prompt: L1–L5 and the L6 user message. */
  fixedTokens: number;
  caps?: ContextCaps;
  /** Turns kept verbatim when compacting (S1 §5.3 "last N turns"). */
  keepTurns?: number;
  /** Compact even if it fits (the model's `condense_now` / `condense_smart`). */
  forceCompaction?: boolean;
}

/**
 * What a transcript row stores as its token estimate when it is written (issue 23): the estimate of the text
 * the model is given for it under the default S3 §6 caps, so that building a turn's history reads it instead
 * of tokenising the transcript again.
 */
export function rowTokens(row: HistoryRow): number {
  return estimateTokens(toMessage(toEntry(row), DEFAULT_CONTEXT_CAPS).content);
}

/**
 * Estimated tokens of the context messages built from `rows` (message i answers the row
 * `rows.length - messages.length + i`, see `buildContext`): a row's stored estimate when the text sent is the
 * very text it was stored for, else the tokeniser (rows stored before estimates were, agents with other caps
 * whose cap changed the text). Equal, message for message, to `estimateMessagesTokens(messages)`.
 */
function contextTokens(rows: readonly HistoryRow[], messages: readonly ContextMessage[], caps: ContextCaps): number {
  const offset = rows.length - messages.length;
  const defaults = sameCaps(caps, DEFAULT_CONTEXT_CAPS);
  let total = 0;
  messages.forEach((m, i) => {
    const row = rows[offset + i] as HistoryRow;
    const stored = row.tokens ?? null;
    const usable = stored !== null && (defaults || toMessage(toEntry(row), DEFAULT_CONTEXT_CAPS).content === m.content);
    total += MESSAGE_OVERHEAD_TOKENS + (usable ? stored : estimateTokens(m.content));
  });
  return total;
}

/** History for the next turn within the model's budget, compacting if needed. */
export function prepareHistory(rows: readonly HistoryRow[], o: PrepareOptions): PreparedHistory {
  const caps = o.caps ?? DEFAULT_CONTEXT_CAPS;
  const budget = inputBudget(o.window);
  const full = buildContext(rows.map(toEntry), caps).messages;
  const fullHistory = contextTokens(rows, full, caps);
  const fullTokens = o.fixedTokens + fullHistory;
  if (fullTokens <= budget && !o.forceCompaction)
    return { messages: full, summary: null, estimatedTokens: fullTokens, historyTokens: fullHistory };

  const { summary, kept } = compact(rows, o.keepTurns ?? 4);
  const keptRows = kept as HistoryRow[];
  const messages = buildContext(keptRows.map(toEntry), caps).messages;
  const summaryTokens = summary ? summaryTokensInL6(summary.text) : 0;
  const historyTokens = contextTokens(keptRows, messages, caps);
  const estimatedTokens = o.fixedTokens + summaryTokens + historyTokens;
  if (estimatedTokens > budget) throw new OverBudgetError(estimatedTokens, budget);
  return { messages, summary, estimatedTokens, historyTokens };
}

/**
 * Tokens a compaction summary costs once the assembler has wrapped it inside L6,
 * plus a margin for rounding when texts are joined.
 */
export function summaryTokensInL6(text: string): number {
  return estimateTokens(`${l6ContextBlock("compaction_summary", text)}\n\n`) + 4;
}

/** Rows fetched per page when collecting recent history. */
export const HISTORY_PAGE = 64;
/** Never read more than this many rows for one turn (pathological transcripts of tiny messages). */
export const HISTORY_MAX_ROWS = 2048;

/**
 * The newest rows, oldest first, read page by page (newest first) only until
 * they hold more characters than the S3 context cap can use — so a turn reads
 * about the same amount whether the transcript has 100 or 100,000 messages.
 * `fetchPage(beforeSeq, limit)` returns rows with seq < beforeSeq, newest first.
 */
export function collectRecentRows<R extends { seq: number; content: string }>(
  fetchPage: (beforeSeq: number, limit: number) => R[],
  caps: ContextCaps = DEFAULT_CONTEXT_CAPS,
): R[] {
  const newestFirst: R[] = [];
  let chars = 0;
  let before = Number.MAX_SAFE_INTEGER;
  while (chars <= caps.total && newestFirst.length < HISTORY_MAX_ROWS) {
    const page = fetchPage(before, HISTORY_PAGE);
    for (const row of page) {
      newestFirst.push(row);
      chars += Math.min(row.content.length, caps.perMessage);
    }
    if (page.length < HISTORY_PAGE) break;
    before = (page.at(-1) as R).seq;
  }
  return newestFirst.reverse();
}

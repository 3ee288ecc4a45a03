/**
 * Session context reconstruction, S3 §6 "Option A": the transcript becomes
 * model context with fixed caps — tool executions as concise `role="tool"`
 * text (`tool <name> result (<id>)` + summary / error / output excerpt), each
 * message at most 1400 characters, the whole at most 12000, the oldest turns
 * dropped first so that the latest turns and recent tool results stay.
 * A tool call and its results are kept or dropped together, never split.
 *
 * Pure, and it walks from the newest message backwards, stopping once the
 * budget is spent: cost grows with what is kept, not with transcript length.
 */
import { placeholdersForModel } from "../security/redact";

/** S3 §6 caps, in characters; configurable per agent. */
export interface ContextCaps {
  perMessage: number;
  toolSummary: number;
  toolError: number;
  toolOutput: number;
  total: number;
}

export const DEFAULT_CONTEXT_CAPS: Readonly<ContextCaps> = {
  perMessage: 1400,
  toolSummary: 220,
  toolError: 320,
  toolOutput: 1000,
  total: 12000,
};

/** A transcript entry as the context builder sees it. */
export type TranscriptEntry =
  | { role: "user"; content: string }
  | { role: "assistant"; content: string; toolCalls?: { id: string; name: string }[] }
  | { role: "tool"; toolName: string; toolCallId: string; summary?: string; error?: string; output?: string };

export interface ContextMessage {
  role: "user" | "assistant" | "tool";
  content: string;
}

/** `text` cut to at most `max` characters, the cut marked with "…". */
export function capText(text: string, max: number): string {
  if (text.length <= max) return text;
  return `${text.slice(0, Math.max(0, max - 1))}…`;
}

/** S3 §6 normalisation of one tool execution. */
export function normaliseToolEntry(e: Extract<TranscriptEntry, { role: "tool" }>, caps: ContextCaps): string {
  const lines = [`tool ${e.toolName} result (${e.toolCallId})`];
  if (e.summary) lines.push(`summary: ${capText(e.summary, caps.toolSummary)}`);
  if (e.error) lines.push(`error: ${capText(e.error, caps.toolError)}`);
  if (e.output) lines.push(`output: ${capText(e.output, caps.toolOutput)}`);
  return lines.join("\n");
}

/** One entry as the model sees it: S3 §6 normalised, placeholders explained, capped. */
export function toMessage(e: TranscriptEntry, caps: ContextCaps): ContextMessage {
  const content = e.role === "tool" ? normaliseToolEntry(e, caps) : e.content;
  // Redaction placeholders are never fed back as if they were content (S1 §5.4).
  return { role: e.role, content: capText(placeholdersForModel(content), caps.perMessage) };
}

/**
 * Groups entries into units that are kept or dropped whole: an assistant
 * message with tool calls plus the tool results that answer it; any other
 * entry alone. A tool result whose call is not in the list is its own unit.
 */
function unitStart(entries: readonly TranscriptEntry[], end: number): number {
  const last = entries[end] as TranscriptEntry;
  if (last.role !== "tool") return end;
  // Walk back over consecutive tool results to the assistant message that called them.
  let i = end;
  while (i > 0 && (entries[i - 1] as TranscriptEntry).role === "tool") i--;
  const caller = entries[i - 1];
  if (caller?.role === "assistant" && caller.toolCalls?.some((c) => c.id === last.toolCallId)) return i - 1;
  return end;
}

/** True when `a` caps every text exactly as `b` does. */
export function sameCaps(a: ContextCaps, b: ContextCaps): boolean {
  return (
    a === b ||
    (a.perMessage === b.perMessage &&
      a.toolSummary === b.toolSummary &&
      a.toolError === b.toolError &&
      a.toolOutput === b.toolOutput &&
      a.total === b.total)
  );
}

/**
 * Builds the capped context from a transcript (oldest first). The messages kept are always the newest
 * entries, one message per entry (units are dropped whole from the oldest end): message i answers entry
 * `entries.length - messages.length + i`.
 */
export function buildContext(
  entries: readonly TranscriptEntry[],
  caps: ContextCaps = DEFAULT_CONTEXT_CAPS,
): { messages: ContextMessage[]; dropped: number } {
  const kept: ContextMessage[][] = [];
  let used = 0;
  let end = entries.length - 1;
  while (end >= 0) {
    const start = unitStart(entries, end);
    const unit = entries.slice(start, end + 1).map((e) => toMessage(e, caps));
    const size = unit.reduce((n, m) => n + m.content.length, 0);
    if (used + size > caps.total) break;
    kept.push(unit);
    used += size;
    end = start - 1;
  }
  const messages = kept.reverse().flat();
  return { messages, dropped: entries.length - messages.length };
}

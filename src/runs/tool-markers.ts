/**
 * The marker tool-call protocol (S4 §3), used when a model's config says
 * `supportsTools: false`:
 *
 *   <<<TOOL_CALLS_JSON>>>
 *   [{"id":"t1","tool":"fs.list_dir","args":{"path":"."}}]
 *   <<<END_TOOL_CALLS_JSON>>>
 *
 * The block is always removed from user-visible text. Each call needs a string
 * `id` unique within the response, a string `tool` and an object `args`.
 * A malformed block yields no calls and a reason the run can report back to
 * the model as a failed tool round — never an exception.
 */
import { z } from "zod";
import { MAX_TOOL_CALLS_ANSWERED } from "./tool-limits";

export const TOOL_CALLS_BEGIN = "<<<TOOL_CALLS_JSON>>>";
export const TOOL_CALLS_END = "<<<END_TOOL_CALLS_JSON>>>";

export const MarkerToolCall = z.strictObject({
  id: z.string().min(1).max(128),
  tool: z.string().min(1).max(128),
  args: z.record(z.string(), z.unknown()),
});
export type MarkerToolCall = z.infer<typeof MarkerToolCall>;

/**
 * At most this many calls in one response, or the block is rejected whole. A parse bound only: how many of a
 * block's calls run is `runs.maxToolCallsPerTurn`'s business (issue 20 §3), as for native tool calls.
 */
export const MAX_MARKER_CALLS = MAX_TOOL_CALLS_ANSWERED;

export type MarkerParse = { visible: string; calls: MarkerToolCall[]; error: null } | { visible: string; calls: []; error: string };

/** Extracts the tool-call block: visible text without it, and the validated calls. */
export function parseToolCallMarkers(reply: string): MarkerParse {
  const start = reply.indexOf(TOOL_CALLS_BEGIN);
  if (start < 0) return { visible: reply.trim(), calls: [], error: null };
  const end = reply.indexOf(TOOL_CALLS_END, start + TOOL_CALLS_BEGIN.length);
  // Everything from the begin marker on is hidden when the block is unterminated.
  const visible = (reply.slice(0, start) + (end >= 0 ? reply.slice(end + TOOL_CALLS_END.length) : "")).replace(/\n{3,}/g, "\n\n").trim();
  if (end < 0) return { visible, calls: [], error: "unterminated tool-call block" };
  if (reply.indexOf(TOOL_CALLS_BEGIN, end) >= 0)
    return { visible: visible.split(TOOL_CALLS_BEGIN)[0]?.trim() ?? "", calls: [], error: "more than one tool-call block" };

  let json: unknown;
  try {
    json = JSON.parse(reply.slice(start + TOOL_CALLS_BEGIN.length, end));
  } catch {
    return { visible, calls: [], error: "tool-call block is not valid JSON" };
  }
  if (!Array.isArray(json)) return { visible, calls: [], error: "tool-call block must be a JSON array" };
  if (json.length > MAX_MARKER_CALLS) return { visible, calls: [], error: `at most ${MAX_MARKER_CALLS} tool calls per response` };
  const calls: MarkerToolCall[] = [];
  for (const [i, item] of json.entries()) {
    const parsed = MarkerToolCall.safeParse(item);
    if (!parsed.success)
      return { visible, calls: [], error: `tool call ${i + 1}: ${parsed.error.issues[0]?.path.join(".") || "entry"} is invalid` };
    if (calls.some((c) => c.id === parsed.data.id))
      return { visible, calls: [], error: `tool call ids must be unique ("${parsed.data.id}" repeats)` };
    calls.push(parsed.data);
  }
  return { visible, calls, error: null };
}

/** The S4 §3 tool-result message content: `{id, tool, ok, output, error}` as JSON. */
export function toolResultMessage(r: {
  id: string;
  tool: string;
  ok: boolean;
  output: unknown;
  error: { code: string; message: string } | null;
}): string {
  return JSON.stringify({ id: r.id, tool: r.tool, ok: r.ok, output: r.ok ? r.output : null, error: r.ok ? null : r.error });
}

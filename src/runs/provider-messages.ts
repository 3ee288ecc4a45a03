/**
 * The run's own tool rounds rebuilt as provider messages for its next model call: each assistant turn that
 * asked for tools, then one tool message per call (S4 §3 result JSON). Native models get `tool_calls` with
 * legal wire names; marker models get their marker block back. Read from the run's rows on every round, so a
 * resumed run sends exactly what an uninterrupted one would.
 */
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { capText } from "../context/caps";
import { toWireName } from "../tools/wire-names";
import { MARKER_BLOCK, type RunContext, safeJson } from "./host";
import type { RunSpec } from "./spec";
import { type RunRow, runToolExecutions, type ToolExecutionRow, transcriptContent } from "./store";
import { TOOL_CALLS_BEGIN, TOOL_CALLS_END, toolResultMessage } from "./tool-markers";

/** The run's finished tool rounds as provider messages; `offersTools` is whether the round offers any tool. */
export function liveMessages(ctx: RunContext, run: RunRow, spec: RunSpec, offersTools: boolean): ChatCompletionMessageParam[] {
  const { sql } = ctx.host;
  const executions = runToolExecutions(sql, run.id).filter((e) => e.status === "done");
  if (executions.length === 0) return [];
  const native = spec.model.supportsTools && offersTools;
  const bySeq = new Map<number, ToolExecutionRow[]>();
  for (const e of executions) bySeq.set(e.assistant_seq, [...(bySeq.get(e.assistant_seq) ?? []), e]);
  const out: ChatCompletionMessageParam[] = [];
  for (const [seq, calls] of [...bySeq.entries()].sort(([a], [b]) => a - b)) {
    out.push(assistantTurn(transcriptContent(sql, seq) ?? "", calls, native));
    for (const c of calls) out.push(toolMessage(c, spec));
  }
  return out;
}

/** The assistant turn that asked for `calls` (a malformed marker block is not repeated to the model). */
function assistantTurn(text: string, calls: ToolExecutionRow[], native: boolean): ChatCompletionMessageParam {
  const real = calls.filter((c) => c.tool !== MARKER_BLOCK);
  if (native)
    return {
      role: "assistant",
      content: text || null,
      tool_calls: real.map((c) => ({
        id: c.tool_call_id,
        type: "function" as const,
        function: { name: safeWireName(c.tool), arguments: c.args },
      })),
    };
  const block = real.length
    ? `${TOOL_CALLS_BEGIN}\n${JSON.stringify(real.map((c) => ({ id: c.tool_call_id, tool: c.tool, args: safeJson(c.args) })))}\n${TOOL_CALLS_END}`
    : "";
  return { role: "assistant", content: [text, block].filter(Boolean).join("\n") };
}

/** One call's result, capped to what the run's caps allow a result and an error, plus the envelope. */
function toolMessage(c: ToolExecutionRow, spec: RunSpec): ChatCompletionMessageParam {
  const content = capText(
    toolResultMessage({
      id: c.tool_call_id,
      tool: c.tool,
      ok: c.ok === 1,
      output: c.output === null ? null : safeJson(c.output),
      error: c.error ? (JSON.parse(c.error) as { code: string; message: string }) : null,
    }),
    spec.caps.toolOutput + spec.caps.toolError + 200,
  );
  return { role: "tool", tool_call_id: c.tool_call_id, content };
}

function safeWireName(name: string): string {
  try {
    return toWireName(name);
  } catch {
    return "invalid_tool_name";
  }
}

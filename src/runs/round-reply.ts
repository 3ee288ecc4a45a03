/**
 * `interpretReply`, the last step of a model round: what the model's answer means for the run. The tool calls
 * it asked for (native, or a marker block for marker-protocol models), the output guard (issue 20 §2) run with
 * the NOTES block still in and again after it — against the conversation's disclosure ledger (issue 33) — NOTES
 * applied to the checkpoint, secrets redacted, invisible characters removed; then, for calls about to be planned,
 * arguments carrying hidden-layer text withheld (the same ledger) and the per-turn/per-run caps.
 */
import type { AssembledPrompt } from "../prompts/assemble";
import { disclosureRefusalMessage } from "../prompts/disclosure";
import { sanitize } from "../prompts/leak-guard/invisible";
import type { DisclosureLedger } from "../prompts/leak-guard/ledger";
import { checkRelease, type OutputVerdict } from "../prompts/output-guard";
import { guardArguments } from "../prompts/tool-args-guard";
import type { ChatResult, ToolCall } from "../providers/adapter";
import { redactText, secretValuesFromEnv } from "../security/redact";
import { loadLedger } from "../sessions/disclosure-ledger";
import { MARKER_BLOCK, type RunContext } from "./host";
import type { RunSpec } from "./spec";
import { type RunRow, runToolExecutions } from "./store";
import {
  DEFAULT_MAX_TOOL_CALLS_PER_RUN,
  DEFAULT_MAX_TOOL_CALLS_PER_TURN,
  isLimitRefusal,
  splitByToolLimits,
  type ToolLimitSplit,
} from "./tool-limits";
import { parseToolCallMarkers } from "./tool-markers";

/** A call the model asked for, before it is planned (args: parsed, or the raw text of invalid JSON). */
export interface AskedCall {
  id: string;
  tool: string;
  args: Record<string, unknown> | string;
}

/** What the model's answer says, ready to store: the visible reply, the calls, and the guard's verdict. */
export interface Reply {
  visible: string;
  verdict: OutputVerdict;
  calls: AskedCall[];
  markerError: string | null;
  /** The texts the output guard treats as hidden beyond the stack's own (the inline L2). */
  hidden: string[];
  /** The conversation's disclosure ledger with this reply (and, once planned, its calls' arguments) recorded. */
  ledger: DisclosureLedger;
  /** The ledger as loaded (its JSON state), so the reply's commit saves it only when it changed. */
  ledgerLoaded: string;
  notesTraces: { kind: "notes_patch" | "actions"; data: object }[];
}

/** Reads the model's answer: calls, guard verdict, NOTES applied (unless the reply leaks), and the stored text. */
export async function interpretReply(ctx: RunContext, prompt: AssembledPrompt, policy: string, result: ChatResult): Promise<Reply> {
  const { host } = ctx;
  // Markers are parsed for marker-protocol models and stripped from every reply (DESIGN "Tool calls").
  const markers = parseToolCallMarkers(result.content);
  let calls: AskedCall[] = result.toolCalls.map((c: ToolCall) => ({ id: c.id, tool: c.name, args: c.arguments }));
  let markerError: string | null = null;
  if (policy === "markers") {
    calls = markers.calls.map((c) => ({ id: c.id, tool: c.tool, args: c.args }));
    markerError = markers.error;
  }
  // Issue 20 §2: the reply is checked with its NOTES block still in, so a leaking NOTES patch is never applied;
  // issue 33: against the conversation's ledger (a copy for this first check: only the released text is recorded).
  const hidden = prompt.system.filter((s) => s.id === "inline").map((s) => s.content);
  const ledger = loadLedger(host.sql, hidden);
  const ledgerLoaded = JSON.stringify(ledger.state());
  // Judged once when the reply carries no NOTES block (nearly every reply): what is checked is what is released.
  const withNotes = markers.visible.includes("<<<");
  const raw = checkRelease(markers.visible, withNotes ? ledger.copy() : ledger, true);
  const notes = raw.blocked ? withheldNotes(markers.visible) : await host.applyNotes(markers.visible);
  const secrets = secretValuesFromEnv(host.env);
  const judged = raw.blocked || (!withNotes && notes.visible === markers.visible);
  const verdict = judged ? raw : checkRelease(notes.visible, withNotes ? ledger : ledger.copy());
  // Issue 33: characters no reader sees are never released (invisible.ts keeps emoji and script sequences).
  const redacted = verdict.blocked ? disclosureRefusalMessage() : sanitize(redactText(notes.visible, secrets));
  const visible = verdict.blocked ? redacted : (host.redactSplitReply?.(redacted) ?? redacted);
  return { visible, verdict, calls, markerError, hidden, ledger, ledgerLoaded, notesTraces: notes.traces };
}

/**
 * The calls to plan from a reply that asked for tools: a malformed marker block becomes one failed call the
 * model sees in the next round (S4 §3); leaking arguments are withheld; calls past the caps (issue 20 §3) are
 * marked by ordinal, to be answered at once with a tool error and never run.
 */
export async function callsToPlan(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  round: number,
  reply: Reply,
): Promise<{ calls: AskedCall[]; limits: ToolLimitSplit<number> }> {
  let calls = reply.calls;
  if (reply.markerError !== null) calls = [{ id: `markers-${round}`, tool: MARKER_BLOCK, args: reply.markerError }];
  calls = await withholdLeakingArgs(ctx, run, calls, reply.ledger);
  const limits = reply.markerError === null ? toolLimits(ctx, run, spec, calls.length) : { admitted: [], refused: [] };
  return { calls, limits };
}

/** Which of a turn's `count` calls (by ordinal) the per-turn and per-run caps admit (issue 20 §3). */
function toolLimits(ctx: RunContext, run: RunRow, spec: RunSpec, count: number): ToolLimitSplit<number> {
  const earlier = runToolExecutions(ctx.host.sql, run.id).filter((e) => e.tool !== MARKER_BLOCK && !isLimitRefusal(e));
  return splitByToolLimits(
    Array.from({ length: count }, (_, i) => i),
    {
      perTurn: spec.maxToolCallsPerTurn ?? DEFAULT_MAX_TOOL_CALLS_PER_TURN,
      perRun: spec.maxToolCallsPerRun ?? DEFAULT_MAX_TOOL_CALLS_PER_RUN,
      admittedBefore: earlier.length,
    },
  );
}

/**
 * Issue 20 §2: a call whose arguments carry hidden-layer text keeps only a placeholder (the gate refuses it),
 * so the text never reaches events, views, bundles or the audit log.
 */
async function withholdLeakingArgs<C extends { tool: string; args: Record<string, unknown> | string }>(
  ctx: RunContext,
  run: RunRow,
  calls: C[],
  ledger: DisclosureLedger,
): Promise<C[]> {
  return Promise.all(
    calls.map(async (c) => {
      const guarded = await guardArguments(typeof c.args === "string" ? c.args : JSON.stringify(c.args), ledger);
      if (!guarded.withheld) return c;
      ctx.host.logger.log("warn", "prompt.disclosure_refused", {
        request_id: run.id,
        stage: "tool_args",
        tool: c.tool,
        signals: [guarded.reason],
      });
      return { ...c, args: guarded.args };
    }),
  );
}

/** A reply refused by the output guard: its NOTES block is not applied, only traced as withheld. */
function withheldNotes(visible: string): { visible: string; traces: { kind: "notes_patch"; data: object }[] } {
  return { visible, traces: [{ kind: "notes_patch", data: { error: "withheld: the reply carried hidden-layer text" } }] };
}

/**
 * Tool-call fan-out limits (issue 20 §3): a model turn may ask for any number of tool calls, but only the first
 * `runs.maxToolCallsPerTurn` of a turn run, and no more than `runs.maxToolCallsPerRun` over the whole run. A call
 * past either cap is never gated or executed: it is answered at once with a `policy.denied` tool error the model
 * reads in its next request, and recorded like any other call (a `tool.call` and a `tool.result` event, a row in
 * the run view's `trace.tool_execution_results`). Its recorded decision carries `limit` (the config key that
 * refused it), which is how later rounds tell refused calls from admitted ones.
 */
import type { GateDecision } from "../tools/policy";
import type { ToolExecutionRow } from "./store";

/** Defaults for runs accepted before the limits existed (their spec carries neither key). */
export const DEFAULT_MAX_TOOL_CALLS_PER_TURN = 16;
export const DEFAULT_MAX_TOOL_CALLS_PER_RUN = 64;

/**
 * Most calls one turn may ask for and still be answered one by one (each refused call is a row, two events and a
 * tool message in the next request). A turn asking for more fails its run before anything is recorded or run.
 */
export const MAX_TOOL_CALLS_ANSWERED = 1024;

/** The S3 §1.3 code a call past a cap is answered with. */
export const TOOL_LIMIT_CODE = "policy.denied" as const;

export type ToolLimitKey = "runs.maxToolCallsPerTurn" | "runs.maxToolCallsPerRun";

/** A refused call's recorded gate decision: a denial naming the limit. */
export type LimitDecision = GateDecision & { limit: ToolLimitKey };

/** What the caps make of one turn's calls: the ones that go on to the gate, and the ones answered at once. */
export interface ToolLimitSplit<C> {
  admitted: C[];
  refused: { call: C; limit: ToolLimitKey; message: string }[];
}

/**
 * Splits a turn's calls (in the model's order) by the caps: the first `perTurn`, and of those only as many as the
 * run still has left of `perRun` after `admittedBefore` admitted calls in earlier rounds.
 */
export function splitByToolLimits<C>(
  calls: readonly C[],
  o: { perTurn: number; perRun: number; admittedBefore: number },
): ToolLimitSplit<C> {
  const left = Math.max(0, o.perRun - o.admittedBefore);
  const split: ToolLimitSplit<C> = { admitted: [], refused: [] };
  calls.forEach((call, i) => {
    if (i >= o.perTurn)
      split.refused.push({
        call,
        limit: "runs.maxToolCallsPerTurn",
        message: `not run: this turn asked for ${calls.length} tool calls and at most ${o.perTurn} run per turn (runs.maxToolCallsPerTurn); ask again for the ones you still need, fewer at a time`,
      });
    else if (split.admitted.length >= left)
      split.refused.push({
        call,
        limit: "runs.maxToolCallsPerRun",
        message: `not run: this run has used all ${o.perRun} of its tool calls (runs.maxToolCallsPerRun); answer with what you have`,
      });
    else split.admitted.push(call);
  });
  return split;
}

/** Whether a recorded call was refused by a cap (rather than gated or run). */
export function isLimitRefusal(row: Pick<ToolExecutionRow, "decision">): boolean {
  if (!row.decision) return false;
  try {
    return typeof (JSON.parse(row.decision) as { limit?: unknown }).limit === "string";
  } catch {
    return false;
  }
}

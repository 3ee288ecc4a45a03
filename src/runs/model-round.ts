/**
 * One model round of a run: `buildPrompt → reserveBudget → callModel → interpretReply`, then what the reply
 * decides — the run completes with it, fails (too many calls or rounds), or plans tool calls for the tool
 * round that follows. Each step lives in its own module; the round's durable writes are in round-commits.ts.
 */
import { REFUSE_SYSTEM_PROMPT } from "../prompts/disclosure";
import type { Finish, RunContext } from "./host";
import { callModel, debugContent, reserveBudget } from "./model-call";
import { commitModelReply, commitModelRequested, commitRunEnd, commitToolPlan } from "./round-commits";
import { buildPrompt } from "./round-prompt";
import { callsToPlan, interpretReply, type Reply } from "./round-reply";
import type { RunSpec } from "./spec";
import type { RunRow } from "./store";
import { MAX_TOOL_CALLS_ANSWERED } from "./tool-limits";
import { logRound } from "./turn-line";

/** One model call and what follows from it. Returns a finish, or undefined to continue with the next round. */
export async function modelRound(
  ctx: RunContext,
  run: RunRow,
  spec: RunSpec,
  userMessage: string,
  signal: AbortSignal,
): Promise<Finish | undefined> {
  const built = await buildPrompt(ctx, run, spec, userMessage);
  if (!built.ok) return built.finish;
  const rp = built.value;
  const budget = await reserveBudget(ctx, run, spec, rp.estimated);
  if (!budget.ok) return budget.finish;

  const round = run.rounds + 1;
  commitModelRequested(ctx, run, spec, round, rp);
  const called = await callModel(ctx, run, spec, rp, round, budget.hold, signal);
  if (!called.ok) return called.finish;
  debugContent(ctx, run, spec, round, userMessage, called.answer.result.content);

  const reply = await interpretReply(ctx, rp.prompt, rp.policy, called.answer.result);
  if (reply.verdict.blocked)
    ctx.host.logger.log("warn", "prompt.disclosure_refused", { request_id: run.id, stage: "output", signals: [reply.verdict.reason] });
  const ending = endingOf(run, spec, reply);
  if (ending) {
    // Issue 23's T3: the call's usage and traces, the reply and the run's terminal state, in one commit.
    commitRunEnd(ctx, run, ending.finish, ending.reply, () => commitModelReply(ctx, run, round, called.answer, reply));
    return ending.finish;
  }
  // The call's usage and traces commit with the tool plan: one commit for the round before its tools (D-065).
  const plan = await callsToPlan(ctx, run, spec, round, reply);
  commitToolPlan(ctx, run, spec, { round, visible: reply.visible, ...plan }, () => commitModelReply(ctx, run, round, called.answer, reply));
  logRound(ctx, run);
  return undefined;
}

/** The finish a reply decides, with the reply stored beside it; null when its tool calls are planned instead. */
function endingOf(run: RunRow, spec: RunSpec, reply: Reply): { finish: Exclude<Finish, { status: "paused" }>; reply: string } | null {
  const { visible, verdict, calls } = reply;
  if (verdict.blocked) {
    // Issue 33: a refusal for what the conversation released over many turns marks the conversation in the audit
    // log (the run.completed event carries it); the other refusals keep their payload.
    const marked =
      verdict.reason === "hidden_text_coverage" ? { disclosure: { reason: verdict.reason, covered: reply.ledger.covered.size } } : {};
    return { reply: visible, finish: { status: "completed", output: visible, payload: { refused: REFUSE_SYSTEM_PROMPT, ...marked } } };
  }
  if (calls.length === 0 && reply.markerError === null) return { reply: visible, finish: { status: "completed", output: visible } };
  if (calls.length > MAX_TOOL_CALLS_ANSWERED)
    return {
      reply: visible,
      finish: {
        status: "failed",
        code: "invalid.request",
        message: `the model asked for ${calls.length} tool calls in one turn, more than the ${MAX_TOOL_CALLS_ANSWERED} the gateway answers; none was run`,
      },
    };
  if (run.rounds >= spec.maxToolRounds)
    return {
      reply: visible,
      finish: {
        status: "failed",
        code: "invalid.request",
        message: `the model asked for more tool rounds than this run allows (runs.maxToolRounds = ${spec.maxToolRounds})`,
      },
    };
  return null;
}

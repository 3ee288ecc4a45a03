/**
 * The run's log line (issue 23): one line per turn, `run.turn`, written when the run ends, carrying every S1 §4.1
 * / S2 §6.1 field of its last model round — the prompt manifest's hashes and sizes (once per round's assembly),
 * provider and model, token estimate and usage, latency — and the run's outcome; a model round that leads to a
 * tool round writes its fields as `run.round` first, and the gate decisions of a tool round ride on the next line
 * (`gates`; D-067). This replaces `prompt.assembled`, `model.call` and `run.finished` (three lines per plain turn)
 * and the `tool.gate` line per call. Hashes, ids and sizes only: no prompt or message text (S1 §4.2). While an HTTP
 * caller waits for the run, its lines are held for that caller's request line (D-068, observability/run-lines.ts).
 */
import type { GateLine, RunTurnLine } from "../observability/logger";
import { manifestTotals } from "../prompts/assemble";
import type { PromptManifest } from "../prompts/manifest";
import type { Finish, RunContext } from "./host";
import type { RunRow } from "./store";

/** What one model round contributes to the line. */
type RoundFields = Omit<RunTurnLine, "run_id" | "request_id" | "agent_id" | "status" | "code" | "rounds" | "tool_calls">;

/** The round's fields gathered so far, per run (one run executes at a time, so at most one entry lives). */
const rounds = new WeakMap<RunContext, Map<string, RoundFields>>();

function fieldsOf(ctx: RunContext, runId: string): RoundFields {
  const byRun = rounds.get(ctx) ?? new Map<string, RoundFields>();
  rounds.set(ctx, byRun);
  const f = byRun.get(runId) ?? {};
  byRun.set(runId, f);
  return f;
}

/** The round's assembled prompt (S2 §6.1): `stack_sha256`, every layer's id, SHA-256 and size, the totals. */
export function notePrompt(ctx: RunContext, runId: string, round: number, m: PromptManifest): void {
  const totals = manifestTotals(m);
  Object.assign(fieldsOf(ctx, runId), {
    round,
    stack_sha256: m.stack_sha256,
    layers: m.stack.map(({ layer, id, sha256, bytes, tokens_est }) => ({ layer, id, sha256, bytes, tokens_est })),
    total_bytes: totals.bytes,
    total_tokens_est: totals.tokens_est,
  });
}

/** The round's model call (S1 §4.1): provider, model, estimate, outcome, usage and latency. */
export function noteModelCall(ctx: RunContext, runId: string, call: Required<Pick<RoundFields, "provider" | "model">> & RoundFields): void {
  Object.assign(fieldsOf(ctx, runId), call);
}

/**
 * A tool call's gate decision (S1 §4.1), carried by the run's next line — the next round's `run.round` or the
 * `run.turn` — instead of a line of its own per call (D-067: under `wrangler dev` a console line costs about as much
 * as an R2 put).
 */
export function noteGate(ctx: RunContext, runId: string, gate: GateLine): void {
  const f = fieldsOf(ctx, runId);
  f.gates = [...(f.gates ?? []), gate];
}

/** A model round that goes on to a tool round: its fields as one `run.round` line. */
export function logRound(ctx: RunContext, run: RunRow): void {
  const f = fieldsOf(ctx, run.id);
  rounds.get(ctx)?.delete(run.id);
  ctx.host.logger.runLine("info", "run.round", { run_id: run.id, request_id: run.id, agent_id: run.agent_id, ...f });
}

/** The run ended: its one `run.turn` line (the last round's fields, the outcome, rounds and tool calls). */
export function logTurn(ctx: RunContext, ended: RunRow, finish: Exclude<Finish, { status: "paused" }>): void {
  const f = fieldsOf(ctx, ended.id);
  rounds.get(ctx)?.delete(ended.id);
  ctx.host.logger.runLine(ended.status === "failed" ? "warn" : "info", "run.turn", {
    run_id: ended.id,
    request_id: ended.id,
    agent_id: ended.agent_id,
    status: ended.status,
    ...(finish.status === "failed" ? { code: finish.code } : {}),
    rounds: ended.rounds,
    tool_calls: ended.tool_calls,
    ...f,
  });
}

/**
 * A paused run writes no round line until it goes on; what its round gathered is dropped (it was logged as
 * `run.round`), except the gate decisions made since, which are written now as one `tool.gate` line (D-067).
 */
export function dropRound(ctx: RunContext, runId: string): void {
  const gates = rounds.get(ctx)?.get(runId)?.gates;
  rounds.get(ctx)?.delete(runId);
  if (gates?.length) ctx.host.logger.runLine("info", "tool.gate", { run_id: runId, gates });
}

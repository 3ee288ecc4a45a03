/**
 * A run's row through its states (S3 §2): started, and finished as completed, failed or cancelled, each with
 * its lifecycle event. Callers wrap these in their storage transaction; a completed run's reply is stored
 * before `finishRun` writes the terminal state.
 */
import { completionOf } from "./completion";
import { emit, type Finish, type RunContext } from "./host";
import { getRun, markRunCancelled, markRunCompleted, markRunFailed, markRunStarted, type RunRow } from "./store";

/** A queued run starts: running, and its `run.started` event. */
export function startRun(ctx: RunContext, run: RunRow): void {
  markRunStarted(ctx.host.sql, run.id, new Date().toISOString());
  emit(ctx, run, "run.started", {});
}

/** Writes the terminal state and its event (for completed runs, nothing else: callers store the reply first). */
export function finishRun(ctx: RunContext, run: RunRow, f: Exclude<Finish, { status: "paused" }>): void {
  const { sql } = ctx.host;
  const iso = new Date().toISOString();
  if (f.status === "completed") {
    markRunCompleted(sql, run.id, f.output, iso);
    const r = getRun(sql, run.id) as RunRow;
    const completion = completionOf(sql, r);
    emit(ctx, run, "run.completed", {
      rounds: r.rounds,
      tool_calls: r.tool_calls,
      usage: { prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens },
      ...f.payload,
      ...(completion ? { completion } : {}),
    });
  } else if (f.status === "failed") {
    markRunFailed(sql, run.id, f.code, f.message, iso);
    emit(ctx, run, "run.failed", { code: f.code, message: f.message });
  } else {
    markRunCancelled(sql, run.id, iso);
    emit(ctx, run, "run.cancelled", { reason: f.reason });
  }
}

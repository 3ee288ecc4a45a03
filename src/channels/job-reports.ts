/**
 * What a chat receives when a scheduled job's run did not end with a report (issue 24 §1; S1 §3.4): one code and an
 * actionable sentence, like a chat reply's escalation (`ESCALATION_REPLY` in replies.ts) — never the run's error
 * text, the escalation's tool attempts or a stack trace. A report goes to a team's channel rather than to the person
 * who asked, so the sentence names the job and the run an operator opens (`GET /api/admin/runs/{id}`, the dashboard).
 */
import { ERROR_CODES } from "../errors";

/** A finished job run, as its chat report needs it. */
export interface FinishedJobRun {
  jobId: string;
  runId: string;
  status: string;
  /** The run ended in a failure-loop escalation (`run.completed` with `needs_guidance`). */
  escalated: boolean;
  /** The run's stored error (JSON `{code, message}`), for a failed run. */
  error: string | null;
}

/** The public code of a failed run's stored error; `internal.error` for anything that is not one of the gateway's codes. */
function errorCode(stored: string | null): string {
  try {
    const code = (JSON.parse(stored ?? "null") as { code?: unknown } | null)?.code;
    if (typeof code === "string" && Object.hasOwn(ERROR_CODES, code)) return code;
  } catch {
    // Not JSON: an older row or a bare message; its text never reaches the chat.
  }
  return "internal.error";
}

/** The short text for a job run that failed, was cancelled or escalated; null when the run's output is the report. */
export function jobFailureText(run: FinishedJobRun): string | null {
  const check = `Ask an operator to check run ${run.runId} in the dashboard`;
  if (run.status === "completed" && run.escalated) {
    return `[internal.error] The scheduled job "${run.jobId}" stopped after repeated tool errors. ${check} and adjust the job's message or tools.`;
  }
  if (run.status === "failed") return `[${errorCode(run.error)}] The scheduled job "${run.jobId}" did not finish. ${check}.`;
  if (run.status === "cancelled") {
    return `[cancelled] The scheduled job "${run.jobId}" was cancelled before it finished. ${check} if that was not intended.`;
  }
  return null;
}

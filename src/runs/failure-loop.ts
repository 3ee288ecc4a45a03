/**
 * The failure loop (S3 §2, DESIGN "Failure loop"), as a pure state machine:
 * - 2 consecutive failing tool results → the next model turn runs in recovery
 *   mode (`tasks/error_recovery` at L5);
 * - 3 more failures while in recovery → the run ends with an assistant message
 *   asking the user for guidance, listing recent attempts, errors and output
 *   snippets (redacted);
 * - recovery clears only after sustained success (2 consecutive successes by
 *   default, configurable), never after a single transient one.
 * The SessionDO persists the state, so it survives eviction.
 */
import { redactText } from "../security/redact";

export interface FailureLoopConfig {
  failuresToRecover: number;
  failuresInRecoveryToEscalate: number;
  successesToClear: number;
  /** Attempts remembered for the escalation message. */
  recentAttempts: number;
}

export const DEFAULT_FAILURE_LOOP: FailureLoopConfig = {
  failuresToRecover: 2,
  failuresInRecoveryToEscalate: 3,
  successesToClear: 2,
  recentAttempts: 5,
};

export interface Attempt {
  tool: string;
  ok: boolean;
  error?: string;
  output?: string;
}

export interface FailureLoopState {
  mode: "normal" | "recovery" | "escalated";
  consecutiveFailures: number;
  failuresInRecovery: number;
  consecutiveSuccesses: number;
  recent: Attempt[];
}

export const INITIAL_FAILURE_LOOP: FailureLoopState = {
  mode: "normal",
  consecutiveFailures: 0,
  failuresInRecovery: 0,
  consecutiveSuccesses: 0,
  recent: [],
};

const SNIPPET = 200;
const snip = (text: string | undefined, secrets: readonly string[]) => {
  if (!text) return undefined;
  const flat = redactText(text, secrets).replace(/\s+/g, " ").trim();
  return flat.length <= SNIPPET ? flat : `${flat.slice(0, SNIPPET - 1)}…`;
};

/** The state after one tool result. Pure. */
export function recordToolResult(
  state: FailureLoopState,
  attempt: Attempt,
  config: FailureLoopConfig = DEFAULT_FAILURE_LOOP,
  secrets: readonly string[] = [],
): FailureLoopState {
  if (state.mode === "escalated") return state;
  const kept: Attempt = { tool: attempt.tool, ok: attempt.ok };
  const error = snip(attempt.error, secrets);
  const output = snip(attempt.output, secrets);
  if (error) kept.error = error;
  if (output) kept.output = output;
  const recent = [...state.recent, kept].slice(-config.recentAttempts);

  if (attempt.ok) {
    const successes = state.consecutiveSuccesses + 1;
    if (state.mode === "recovery" && successes < config.successesToClear)
      return { ...state, consecutiveFailures: 0, consecutiveSuccesses: successes, recent };
    return { mode: "normal", consecutiveFailures: 0, failuresInRecovery: 0, consecutiveSuccesses: successes, recent };
  }

  if (state.mode === "recovery") {
    const inRecovery = state.failuresInRecovery + 1;
    return {
      mode: inRecovery >= config.failuresInRecoveryToEscalate ? "escalated" : "recovery",
      consecutiveFailures: state.consecutiveFailures + 1,
      failuresInRecovery: inRecovery,
      consecutiveSuccesses: 0,
      recent,
    };
  }
  const failures = state.consecutiveFailures + 1;
  return {
    mode: failures >= config.failuresToRecover ? "recovery" : "normal",
    consecutiveFailures: failures,
    failuresInRecovery: 0,
    consecutiveSuccesses: 0,
    recent,
  };
}

/** The terminal assistant message of an escalated run: what was tried, what failed, what came back. */
export function escalationMessage(state: FailureLoopState): string {
  const lines = state.recent.map((a, i) => {
    const parts = [`${i + 1}. ${a.tool}: ${a.ok ? "succeeded" : "failed"}`];
    if (a.error) parts.push(`error: ${a.error}`);
    if (a.output) parts.push(`output: ${a.output}`);
    return parts.join(" — ");
  });
  return [
    "I've tried several times and keep running into errors, so I've stopped rather than keep guessing.",
    "",
    "Recent attempts:",
    ...lines,
    "",
    "How would you like me to proceed? For example: different inputs, a permission I'm missing, or a different approach.",
  ].join("\n");
}

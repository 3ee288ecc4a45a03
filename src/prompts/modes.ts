/**
 * Prompt mode selection (S5 §System Prompt Selection, §6.1): pure and
 * precedence-ordered — setup, then automation, then coding; scratch when the
 * agent has no configuration. Modes are L5 task prompts (DESIGN §2).
 */

export type TaskMode = "setup" | "automation" | "coding" | "scratch";

export interface ModeInput {
  /** `"setup"` for a setup session; anything else is an ordinary session. */
  sessionType?: string | undefined;
  /** `"automation"` when an automation (e.g. a scheduled job) started the session. */
  clientType?: string | undefined;
  /** Whether the agent has project configuration (false → scratch). */
  configured: boolean;
}

/**
 * The task mode for a session: setup → automation → coding, and scratch for an
 * unconfigured agent. A setup session stays setup without configuration: creating
 * that configuration is what it is for.
 */
export function selectTaskMode(input: ModeInput): TaskMode {
  if (input.sessionType === "setup") return "setup";
  if (!input.configured) return "scratch";
  if (input.clientType === "automation") return "automation";
  return "coding";
}

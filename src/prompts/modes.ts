/**
 * Prompt mode selection (S5 §System Prompt Selection, §6.1): pure and
 * precedence-ordered — setup, then automation, then coding; scratch instead of
 * coding when the agent has no configuration. Modes are L5 task prompts (DESIGN §2).
 * The engine calls it for every model turn (`buildPrompt` in src/runs/round-prompt.ts).
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
 * unconfigured agent outside those two. A setup session stays setup without
 * configuration (creating it is what it is for); a job run stays automation
 * without it, because nobody watches it and it must report how it ended
 * (automation.complete), which only the automation addendum asks for.
 */
export function selectTaskMode(input: ModeInput): TaskMode {
  if (input.sessionType === "setup") return "setup";
  if (input.clientType === "automation") return "automation";
  if (!input.configured) return "scratch";
  return "coding";
}

/**
 * The tools a mode's L5 text tells the model to call (prompts/tasks/*), which a run in that mode is offered
 * on top of the agent's allowlist, still under the tool policy (docs/tools.md "Mode tools").
 */
export const MODE_TOOLS: Readonly<Record<TaskMode, readonly string[]>> = {
  setup: ["save_service_commands", "save_env_files", "request_env_variables", "verify", "save_snapshot"],
  automation: ["automation.complete"],
  coding: [],
  scratch: [],
};

/** The mode tools of a run, known without the agent's configuration (coding and scratch add none). */
export function modeToolsFor(sessionType: string | undefined, clientType: string | undefined): readonly string[] {
  return MODE_TOOLS[selectTaskMode({ sessionType, clientType, configured: true })];
}

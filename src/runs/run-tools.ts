/**
 * The tools a run may use: its allowlist (the agent's, widened by its mode, D-044) and the tools offered to the
 * model each round. The prompt offers them; the gate checks every call against the same allowlist.
 */
import { modeToolsFor } from "../prompts/modes";
import type { ToolDefinition } from "../tools/registry";
import { type RunContext, sessionTypeOf } from "./host";
import type { RunSpec } from "./spec";

/**
 * The tools offered to the model: allowlisted and registered, each once under its canonical name.
 * Setup-only tools (S5 §6.2) are offered in setup sessions only.
 */
export function offeredTools(ctx: RunContext, spec: RunSpec): ToolDefinition[] {
  const seen = new Set<ToolDefinition>();
  const setup = sessionTypeOf(ctx) === "setup";
  for (const name of allowedTools(ctx, spec)) {
    const def = ctx.registry.get(name);
    if (def && (!def.setupOnly || setup)) seen.add(def);
  }
  return [...seen].sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * The run's allowlist: the agent's, plus the tools its mode's L5 text tells the model to call (a job run:
 * automation.complete; a setup session: the setup tools). The tool policy still gates each call.
 */
export function allowedTools(ctx: RunContext, spec: RunSpec): string[] {
  return [...spec.tools, ...modeToolsFor(sessionTypeOf(ctx), spec.task)];
}

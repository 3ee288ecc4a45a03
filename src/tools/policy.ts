/**
 * The tool policy engine (S1 §3.2, §3.3; DESIGN "Approvals"): pure and
 * fail-closed. A call is allowed only when every allowlist admits it — the
 * agent's tool names, the tool's channels, the gateway's risk classes — and a
 * call that needs a human (side effects; a schema that changed since the
 * policy was written) is `requires_approval`. Every decision carries the
 * channel, risk, policy id and outcome, which the run records and logs (the
 * gate outcome of S1 §4.1).
 */
import { sendApprovalChannel } from "../prompts/channels";
import type { RiskClass, ToolDefinition, ToolRegistry } from "./registry";

export interface ToolPolicy {
  /** Recorded with every decision, so a decision can be traced to the policy that made it. */
  id: string;
  /** Risk classes allowed at all. */
  risks: RiskClass[];
  /** Risk classes that need a human approval. */
  approvalRequired: RiskClass[];
  /** Per tool (canonical name): the channels it may run on; a tool not listed runs on any channel. */
  channels: Record<string, string[]>;
}

export type GateOutcome = "allowed" | "denied" | "requires_approval";

export interface GateDecision {
  outcome: GateOutcome;
  /** S3 §1.3 code for a denial. */
  code: "tool.not_found" | "policy.denied" | null;
  reason: string;
  tool: string;
  risk: RiskClass | null;
  channel: string;
  policy_id: string;
}

export interface GateInput {
  /** The name the model called (a name or an alias). */
  calledAs: string;
  registry: ToolRegistry;
  agentId: string;
  /** The agent's allowlist (names or aliases). */
  allow: readonly string[];
  channel: string;
  policy: ToolPolicy;
  /** SHA-256 of the tool's current JSON Schema, and the one the policy was written against (from the lock). */
  schemaHash?: string | undefined;
  lockedHash?: string | undefined;
  /** The call's arguments as sent (unvalidated), for tools whose approval depends on them. */
  args?: unknown;
}

/** Whether `def` is on the agent's allowlist (by its name or any alias). */
export function isAllowlisted(def: ToolDefinition, allow: readonly string[], registry: ToolRegistry): boolean {
  return allow.some((name) => registry.get(name) === def);
}

/** The decision for one call. Pure. */
export function decide(input: GateInput): GateDecision {
  const def = input.registry.get(input.calledAs);
  const base = { channel: input.channel, policy_id: input.policy.id };
  if (!def)
    return {
      ...base,
      outcome: "denied",
      code: "tool.not_found",
      reason: `no tool named "${input.calledAs.slice(0, 64)}"`,
      tool: input.calledAs.slice(0, 64),
      risk: null,
    };
  const at = { ...base, tool: def.name, risk: def.risk };
  if (!isAllowlisted(def, input.allow, input.registry))
    return { ...at, outcome: "denied", code: "policy.denied", reason: `${def.name} is not allowed for agent "${input.agentId}"` };
  const channels = input.policy.channels[def.name];
  if (channels && !channels.includes(input.channel))
    return {
      ...at,
      outcome: "denied",
      code: "policy.denied",
      reason: `${def.name} is not allowed on channel "${input.channel}" (allowed: ${channels.join(", ") || "none"})`,
    };
  if (!input.policy.risks.includes(def.risk))
    return {
      ...at,
      outcome: "denied",
      code: "policy.denied",
      reason: `${def.name} is ${def.risk}, a risk class this gateway does not allow`,
    };
  // Writes that change what will run (issue 20 §6) need a human even where the policy asks for none.
  const needed = def.approvalNeeded?.(input.args);
  if (needed) return { ...at, outcome: "requires_approval", code: null, reason: needed };
  if (input.lockedHash !== undefined && input.schemaHash !== undefined && input.lockedHash !== input.schemaHash)
    return {
      ...at,
      outcome: "requires_approval",
      code: null,
      reason: `${def.name}'s parameters changed since the policy was written (schema drift): a human must approve until the lock is updated`,
    };
  const emailLike = def.name === "message.send" ? sendApprovalChannel([input.channel, sendTarget(input.args)]) : null;
  if (emailLike !== null) return { ...at, outcome: "requires_approval", code: null, reason: sendApprovalReason(emailLike) };
  if (input.policy.approvalRequired.includes(def.risk))
    return { ...at, outcome: "requires_approval", code: null, reason: `${def.name} is ${def.risk}: it needs a human approval` };
  return { ...at, outcome: "allowed", code: null, reason: "allowlisted" };
}

/** The channel a `message.send` call targets, if its arguments name one. */
function sendTarget(args: unknown): string | undefined {
  const channel = args && typeof args === "object" ? (args as Record<string, unknown>).channel : undefined;
  return typeof channel === "string" ? channel : undefined;
}

/** Why a send on an email-like channel waits for a human (S1 §2.4 `external_email`: require approval to send). */
export function sendApprovalReason(channel: string): string {
  return `message.send on channel "${channel.slice(0, 32)}" (external_email policy) needs a human approval for every send`;
}

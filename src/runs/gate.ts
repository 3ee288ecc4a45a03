/**
 * The gate a planned call passes before its handler runs (S1 §3.2, fail closed): refusals that need no policy
 * (withheld arguments, a malformed marker block), the policy decision with the setup-only guard (S5 §6.2), the
 * honeypot exception for templated sends (S1 §3.3 Phase 2), and for calls that need a human the approval step
 * (approval-flow.ts).
 */
import { sendApprovalChannel } from "../prompts/channels";
import { isWithheld, WITHHELD_ERROR } from "../prompts/tool-args-guard";
import { honeypotArgs } from "../tools/builtin/message";
import { checkHoneypot, honeypotRecipient, reserveHoneypotSend } from "../tools/honeypot";
import { decide, type GateDecision } from "../tools/policy";
import type { ToolOutcome } from "../tools/registry";
import { lockedSchemaHash, schemaHash } from "../tools/schema-lock";
import { approvalStep, type GateResult } from "./approval-flow";

import { MARKER_BLOCK, type RunContext, safeJson, sessionTypeOf } from "./host";
import { allowedTools } from "./run-tools";
import type { RunSpec } from "./spec";
import type { RunRow, ToolExecutionRow } from "./store";
import { noteGate } from "./turn-line";

/** Why a setup-only tool is refused outside setup sessions (S5 §6.2). */
export function setupOnlyReason(tool: string): string {
  return `${tool} is available only in setup sessions`;
}

type ErrorCode = Extract<ToolOutcome, { ok: false }>["error"]["code"];

/** A call answered without running, with the decision that answered it. */
const refused = (decision: GateDecision | null, code: ErrorCode, message: string): GateResult => ({
  paused: false,
  decision,
  outcome: { ok: false, error: { code, message } },
});

/**
 * The policy decision for one call (S1 §3.2, fail closed), and for calls that need a human the
 * approval step (S1 §3.3): the first time, an approval is requested and the run pauses; once decided,
 * an approval lets the call run only with the arguments it was granted for.
 */
export async function gate(ctx: RunContext, run: RunRow, spec: RunSpec, call: ToolExecutionRow): Promise<GateResult> {
  if (isWithheld(call.args)) return { paused: false, decision: null, outcome: { ok: false, error: { ...WITHHELD_ERROR } } };
  if (call.tool === MARKER_BLOCK) return refused(null, "invalid.request", `tool-call block rejected: ${call.args}`);
  let decision = await policyDecision(ctx, run, spec, call);
  if (decision.outcome === "denied") return refused(decision, decision.code ?? "policy.denied", decision.reason);
  const args = safeJson(call.args);
  if (!args || typeof args !== "object" || Array.isArray(args))
    return refused(decision, "tool.input_invalid", "the tool input must be a JSON object");
  if (decision.outcome === "allowed") return { paused: false, decision, outcome: null };

  const honeypot = await honeypotException(ctx, spec, decision, args as Record<string, unknown>);
  if (honeypot.ok) return honeypot.result;
  decision = honeypot.decision;
  return approvalStep(ctx, run, spec, call, decision);
}

/** The policy's decision, noted for the run's next log line (D-067), with the setup-only guard applied on top. */
async function policyDecision(ctx: RunContext, run: RunRow, spec: RunSpec, call: ToolExecutionRow): Promise<GateDecision> {
  const { host, registry } = ctx;
  const def = registry.get(call.tool);
  const decision = decide({
    calledAs: call.tool,
    registry,
    agentId: spec.agentId,
    allow: allowedTools(ctx, spec),
    channel: host.channel(),
    policy: spec.policy,
    schemaHash: def ? await schemaHash(def) : undefined,
    lockedHash: def ? (host.lockedSchemaHash ?? lockedSchemaHash)(def.name) : undefined,
    args: safeJson(call.args),
  });
  noteGate(ctx, run.id, {
    tool: decision.tool,
    channel: decision.channel,
    risk: decision.risk ?? "unknown",
    policy_id: decision.policy_id,
    outcome: decision.outcome,
  });
  // S5 §6.2, defense in depth: a setup-only tool is refused outside setup sessions even if a model names it.
  if (def?.setupOnly && decision.outcome !== "denied" && sessionTypeOf(ctx) !== "setup")
    return { ...decision, outcome: "denied", code: "policy.denied", reason: setupOnlyReason(def.name) };
  return decision;
}

/**
 * S1 §3.3 Phase 2: a templated message.send that meets every honeypot rule goes without approval.
 * S1 §2.4: an external_email send never qualifies (`decide` already asked for approval, naming the channel).
 * Not met: the decision, its reason saying which rule was broken when one was checked.
 */
async function honeypotException(
  ctx: RunContext,
  spec: RunSpec,
  decision: GateDecision,
  args: Record<string, unknown>,
): Promise<{ ok: true; result: GateResult } | { ok: false; decision: GateDecision }> {
  const emailLike = decision.tool === "message.send" && sendApprovalChannel([decision.channel, args.channel]);
  if (decision.tool !== "message.send" || !spec.honeypot || decision.reason.includes("schema drift") || emailLike)
    return { ok: false, decision };
  const sendArgs = honeypotArgs(args);
  if (!sendArgs) return { ok: false, decision };
  const check = await checkHoneypot({ args: sendArgs, config: spec.honeypot, db: ctx.host.env.DB, agentId: spec.agentId, now: new Date() });
  // Issue 20 §4: the check above only names a broken rule; the place under the rate limits is taken
  // atomically here, before anything is sent, so concurrent sends from other sessions cannot all pass.
  const held = check.ok ? await reserveHoneypot(ctx, spec, honeypotRecipient(sendArgs)) : check;
  if (held.ok)
    return {
      ok: true,
      result: {
        paused: false,
        decision: { ...decision, outcome: "allowed", reason: "honeypot exception (S1 §3.3 Phase 2)" },
        outcome: null,
        honeypotSend: held.id,
      },
    };
  return { ok: false, decision: { ...decision, reason: `${decision.reason} (honeypot exception not met: ${held.reason})` } };
}

/** A honeypot send's place under the hourly limits; fails closed (the send then needs an approval). */
async function reserveHoneypot(
  ctx: RunContext,
  spec: RunSpec,
  recipient: string,
): Promise<{ ok: true; id: number } | { ok: false; reason: string }> {
  const config = spec.honeypot as NonNullable<RunSpec["honeypot"]>;
  try {
    return await reserveHoneypotSend(ctx.host.env.DB, { agentId: spec.agentId, recipient, config, now: new Date() });
  } catch {
    return { ok: false, reason: "the rate limits could not be checked, so the send needs approval" };
  }
}

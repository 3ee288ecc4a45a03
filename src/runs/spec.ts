/**
 * The run spec: everything a run needs from the configuration, resolved by the
 * Worker when the run is accepted and stored with the run. A run executes under
 * the configuration it was accepted under (and its record says which), and the
 * SessionDO never needs the config file. It holds no secrets: the provider key
 * is read from the environment at call time (S1 §1.3).
 */

import type { HoneypotConfig } from "../config/honeypot";
import { type ResolvedModel, resolveAgentModel } from "../config/model-ref";
import type { GatewayConfig } from "../config/schema";
import type { ContextCaps } from "../context/caps";
import { deploymentConfig, type SecretOrigins, secretOrigins } from "../security/secret-origins";
import type { ToolPolicy } from "../tools/policy";
import { type AlertSpec, alertSpecs } from "../usage/alerts";
import type { FailureLoopConfig } from "./failure-loop";
import type { KeyBudget } from "./token-budget";

export interface RunSpec {
  agentId: string;
  /** The session's channel, for L3 (`http`, `telegram`, …). */
  channel: string;
  model: ResolvedModel;
  caps: ContextCaps;
  /** Tool names (or aliases) allowlisted for the agent. */
  tools: string[];
  maxToolRounds: number;
  /** Issue 20 §3: tool calls that run per model turn and per run; the rest are refused (absent on older runs: 16, 64). */
  maxToolCallsPerTurn?: number;
  maxToolCallsPerRun?: number;
  toolTimeoutMs: { min: number; max: number };
  providerAttempts: number;
  providerTimeoutMs: number;
  failureLoop: FailureLoopConfig;
  /** Provider tokens per UTC day for the agent; null = unlimited. */
  tokensPerDay: number | null;
  /** Provider tokens per UTC day for one caller of the agent (issue 20 §4); null or absent = only the agent's limit. */
  tokensPerCallerPerDay?: number | null;
  /** Issue 25 §1: the API key record the run was submitted with, when it has a daily token budget of its own. */
  keyBudget?: KeyBudget;
  /** Who the per-caller limits count against (src/runs/caller.ts); absent = the run's API caller, else the agent. */
  caller?: string;
  /** Pending approvals one caller may have on the agent (issue 20 §4); absent on older runs = the default, 5. */
  maxPendingPerCaller?: number;
  /** Pending approvals the agent may have (absent on older runs = the default, 20). */
  maxPendingPerAgent?: number;
  /** The tool policy in force (S1 §3.2) and how approvals behave. */
  policy: ToolPolicy;
  approvalTtlSeconds: number;
  /** S1 §3.3 Phase 2 honeypot exception for `message.send`; null = every send needs approval. */
  honeypot: HoneypotConfig | null;
  /** S4 §4 global network allowlist for `http.get`; null = none. */
  netAllowlist: string[] | null;
  /** L5 task mode (S5 §System Prompt Selection): `automation` for runs a scheduled job started, `setup` in setup sessions. */
  task?: "automation" | "setup";
  /** API base URLs of the chat channels enabled when the run was accepted (for `message.send`). */
  channelApis?: Record<string, string>;
  /**
   * Where the deployment's own config sends each outbound credential (issue 20 §5): a Worker secret is sent
   * only there, whatever the config in force says (absent on older runs: the bundled file's origins).
   */
  secretOrigins?: SecretOrigins;
  /** How long a tool call's outcome stays in the session's idempotency store (`tools.callbacks.retentionSeconds`). */
  idempotencyRetentionMs?: number;
  /** The configuration the run was accepted under (absent on older runs and in tests with a fixed config). */
  config?: ConfigRef;
  /** S4 §5 retrieval bounds per model turn (`agents.<id>.memory`; absent on older runs: 5 items, 2000 chars). */
  memory?: { topK: number; maxChars: number };
  /**
   * Issue 24 §2: present (true) when the run's channel is Telegram or Slack and the agent names approvers there:
   * an approval of this run is then offered in its chat with Approve / Deny buttons. Absent otherwise.
   */
  chatApprovals?: true;
  /** `logging.debugContent`: message text in the logs, for local providers only (absent on older runs). */
  debugContent?: { enabled: boolean; redactEmails: boolean; redactPhones: boolean };
  /** Issue 25 §2: the budget alerts watching this run (its agent's and its caller's); absent = none (D-078). */
  usageAlerts?: AlertSpec[];
}

/** Which configuration: the bundled file (version 0) or an admin-posted version, and its hash (src/config/versions.ts). */
export interface ConfigRef {
  source: "bundled" | "admin";
  version: number;
  sha256: string;
}

/** Whether a run of `agent` on `channel` offers its approvals in the chat (issue 24 §2: someone is on the list). */
function offersChatApprovals(agent: GatewayConfig["agents"][string], channel: string): boolean {
  if (channel !== "telegram" && channel !== "slack") return false;
  return (agent.approvers?.[channel]?.length ?? 0) > 0;
}

/**
 * The spec for a run of `agentId` on `channel` (the agent must exist in `config`); `ref` names that configuration,
 * so the run's record (`run.created`) says which version it ran under.
 */
export function buildRunSpec(config: GatewayConfig, agentId: string, channel: string, ref?: ConfigRef): RunSpec {
  const agent = config.agents[agentId];
  if (!agent) throw new Error(`unknown agent "${agentId}"`);
  const alerts = alertSpecs(config, agentId);
  return {
    agentId,
    channel,
    model: resolveAgentModel(config, agentId),
    caps: { ...agent.context },
    tools: [...agent.tools.allow],
    maxToolRounds: config.runs.maxToolRounds,
    maxToolCallsPerTurn: config.runs.maxToolCallsPerTurn,
    maxToolCallsPerRun: config.runs.maxToolCallsPerRun,
    toolTimeoutMs: { ...config.runs.toolTimeoutMs },
    providerAttempts: config.runs.providerAttempts,
    providerTimeoutMs: config.runs.providerTimeoutMs,
    failureLoop: { ...config.runs.failureLoop, recentAttempts: 5 },
    memory: { ...agent.memory },
    tokensPerDay: agent.budget.tokensPerDay ?? null,
    tokensPerCallerPerDay: agent.budget.tokensPerCallerPerDay ?? null,
    maxPendingPerCaller: config.tools.policy.approvals.maxPendingPerCaller,
    maxPendingPerAgent: config.tools.policy.approvals.maxPendingPerAgent,
    policy: {
      id: config.tools.policy.id,
      risks: [...config.tools.policy.risks],
      approvalRequired: [...config.tools.policy.approvalRequired],
      channels: structuredClone(config.tools.policy.channels),
    },
    approvalTtlSeconds: config.tools.policy.approvals.ttlSeconds,
    honeypot: config.tools.policy.honeypot ? structuredClone(config.tools.policy.honeypot) : null,
    netAllowlist: config.tools.policy.netAllowlist ? [...config.tools.policy.netAllowlist] : null,
    debugContent: { ...config.logging.debugContent },
    ...(ref?.sha256 ? { config: { source: ref.source, version: ref.version, sha256: ref.sha256 } } : {}),
    idempotencyRetentionMs: config.tools.callbacks.retentionSeconds * 1000,
    channelApis: {
      ...(config.channels.telegram.enabled ? { telegram: config.channels.telegram.apiBaseUrl } : {}),
      ...(config.channels.slack.enabled ? { slack: config.channels.slack.apiBaseUrl } : {}),
    },
    // Without `ref` (tests) the config is the deployment's own.
    secretOrigins: secretOrigins(deploymentConfig(config, ref?.source)),
    ...(offersChatApprovals(agent, channel) ? { chatApprovals: true as const } : {}),
    ...(alerts.length > 0 ? { usageAlerts: alerts } : {}),
  };
}

/**
 * Run specs built in this isolate, per configuration object: the configuration in force is one object for as
 * long as its version is (src/config/versions.ts keeps it per newest version number, re-checked every
 * `ADMIN_REFRESH_MS`), so a new version in force is a new object and is never answered from an older one's specs.
 */
const specs = new WeakMap<GatewayConfig, Map<string, RunSpec>>();

/** Freezes `value` and everything in it: a cached spec is shared by every turn that uses it. */
function deepFreeze<T>(value: T): T {
  if (value && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/**
 * `buildRunSpec`, built once per isolate for each (configuration in force, agent, channel, version) and shared,
 * frozen, by every turn after it (issue 23 D-055): a turn does not rebuild the spec, and a new configuration
 * version in force gets specs of its own.
 */
export function cachedRunSpec(config: GatewayConfig, agentId: string, channel: string, ref?: ConfigRef): RunSpec {
  let byKey = specs.get(config);
  if (!byKey) {
    byKey = new Map();
    specs.set(config, byKey);
  }
  const key = JSON.stringify([agentId, channel, ref?.source ?? null, ref?.version ?? null, ref?.sha256 ?? null]);
  let spec = byKey.get(key);
  if (!spec) {
    spec = deepFreeze(buildRunSpec(config, agentId, channel, ref));
    byKey.set(key, spec);
  }
  return spec;
}

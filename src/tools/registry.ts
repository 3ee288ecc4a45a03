/**
 * The tool registry: every tool the gateway can run, defined once — its name
 * (S4 §4 namespaced, e.g. `fs.read_text`), a description and JSON Schema for
 * the model, a risk class (S1 §3.2) and its handler. The run engine looks
 * tools up here; anything not registered is `tool.not_found`, and anything not
 * allowlisted for the agent is never offered and is `policy.denied` if called.
 *
 * Handlers receive validated-shape input and a context; they return a
 * `ToolOutcome` and never need to throw: a thrown error becomes
 * `internal.error` without its message reaching the model or the caller.
 */
import { z } from "zod";
import type { HoneypotConfig } from "../config/honeypot";
import type { ToolError } from "./envelope";

export const RISK_CLASSES = ["read_only", "draft_only", "side_effect"] as const;
export type RiskClass = (typeof RISK_CLASSES)[number];

/** S5 session types: `setup` sessions configure an agent's environment and alone get the setup-only tools. */
export type SessionType = "setup" | "ordinary";

/** An automation completion (S5 `automation.complete`), as recorded. */
export interface AutomationCompletion {
  completion_id: string;
  run_id: string;
  outcome: string;
  summary: string | null;
  tool_call_id: string;
  recorded_at: string;
}

/**
 * What a SessionDO offers the gateway-mediated S5 tools (`verify`, `save_snapshot`, `automation.complete`, …),
 * whether the call comes from a run or from a sandbox callback.
 */
export interface SessionToolHost {
  sessionId: string;
  sessionType: SessionType;
  /** The run the call belongs to — for a sandbox callback the session's running (else latest) run — or null. */
  runId: string | null;
  /**
   * The session's S4 §1.2 checkpoint as stored: state, revision, and (from a SessionDO) the bounded recent messages
   * of the current generation and the trace tail, so a snapshot of it can be restored whole.
   */
  checkpoint(): {
    state: unknown;
    revision: number;
    updated_ts: string | null;
    recent_messages?: { role: string; content: string }[];
    trace_tail?: string[];
  };
  /**
   * Records an automation completion, idempotent by `completion_id`: the same id with the same content is a
   * duplicate (the first record comes back); with other content a conflict; a run not in this session is refused,
   * and so (`other_run`) is, for a run's own tool call, any run but that one (issue 21 §1).
   */
  recordCompletion(c: Omit<AutomationCompletion, "recorded_at">): {
    status: "recorded" | "duplicate" | "conflict" | "unknown_run" | "other_run";
    completion?: AutomationCompletion;
  };
  /** Queues an audit event (S3 §3) in the session's stream, actor `tool`. */
  audit(eventType: string, payload: Record<string, unknown>): void;
}

export interface ToolContext {
  env: Env;
  agentId: string;
  runId: string;
  sessionKey: string;
  /** The session's channel (`http`, `telegram`, …). */
  channel: string;
  toolCallId: string;
  /** Capabilities an admin granted this session (S4 §1.1), e.g. `net`, `net:example.com`. */
  capabilities: readonly string[];
  /** S4 §4 global network allowlist for `http.get` (null = none); undefined = the tool's own default. */
  netAllowlist?: readonly string[] | null | undefined;
  /** The honeypot configuration in force (`message.send` templates), if any. */
  honeypot?: HoneypotConfig | undefined;
  /** This call holds a honeypot reservation (issue 20 §4): the send is already counted toward the rate limits. */
  honeypotReserved?: boolean | undefined;
  /** Aborted when the call's `timeout_ms` elapses or the run is cancelled. */
  signal: AbortSignal;
  timeoutMs: number;
  /** API base URLs of the enabled chat channels (`telegram`, `slack`), for `message.send`. */
  channelApis?: Readonly<Record<string, string>> | undefined;
  /** Where the deployment's config sends each bot token (src/security/secret-origins.ts), for `message.send`. */
  secretOrigins?: Readonly<Record<string, string>> | undefined;
  /** The session's side of S5 tools; present whenever a SessionDO runs the call. */
  session?: SessionToolHost | undefined;
  /** S1 §4.3: a tool hands over the exact outbound text it rendered (a draft, a message); the run records its hash. */
  rendered?: ((text: string) => void) | undefined;
}

/**
 * What a handler returns. `rendered_sha256` is set by the engine, never a handler: the SHA-256 of the text the
 * tool handed to `ToolContext.rendered` (S1 §4.3), recorded in `tool.result` and the `tool.rendered` log line.
 */
export type ToolOutcome =
  | { ok: true; output: unknown; summary?: string; rendered_sha256?: string }
  | { ok: false; error: Pick<ToolError, "code" | "message"> & { retryable?: boolean }; summary?: string; rendered_sha256?: string };

export interface ToolDefinition {
  name: string;
  /** Other names that resolve to this tool (S3's `fs.read` for `fs.read_text`). */
  aliases?: readonly string[];
  description: string;
  /** The input schema, when the tool was defined with `defineTool` (the engine validates with it before the handler). */
  input?: z.ZodType;
  /** JSON Schema of the input object (S1 §3.1: no unions where an enum would do, no property named `format`). */
  parameters: Record<string, unknown>;
  risk: RiskClass;
  /** S5 §6.2: offered and run only in setup sessions (refused at run time elsewhere, too). */
  setupOnly?: boolean;
  /**
   * Why a call with these (unvalidated) arguments needs a human approval whatever the policy's
   * `approvalRequired` says, or null when it does not (issue 20 §6: writes that change what will run).
   */
  approvalNeeded?: (args: unknown) => string | null;
  handler: (input: Record<string, unknown>, ctx: ToolContext) => Promise<ToolOutcome>;
}

/** The JSON Schema the model and the docs see for a Zod input schema (input side: defaults are optional). */
export function toolJsonSchema(schema: z.ZodType): Record<string, unknown> {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { io: "input" });
  return rest;
}

/**
 * Defines a tool once: its Zod input schema is the source of its JSON Schema and of input validation,
 * so the handler receives parsed input (defaults applied).
 */
export function defineTool<S extends z.ZodObject>(def: {
  name: string;
  aliases?: readonly string[];
  description: string;
  input: S;
  risk: RiskClass;
  setupOnly?: boolean;
  approvalNeeded?: (args: unknown) => string | null;
  handler: (input: z.output<S>, ctx: ToolContext) => Promise<ToolOutcome>;
}): ToolDefinition {
  return {
    name: def.name,
    ...(def.aliases ? { aliases: def.aliases } : {}),
    ...(def.setupOnly ? { setupOnly: true } : {}),
    ...(def.approvalNeeded ? { approvalNeeded: def.approvalNeeded } : {}),
    description: def.description,
    input: def.input,
    parameters: toolJsonSchema(def.input),
    risk: def.risk,
    handler: async (raw, ctx) => {
      const parsed = def.input.safeParse(raw);
      if (!parsed.success) return { ok: false, error: { code: "tool.input_invalid", message: describeInputError(parsed.error) } };
      return def.handler(parsed.data, ctx);
    },
  };
}

/** `tool.input_invalid` text naming each offending field. */
export function describeInputError(error: z.ZodError): string {
  return error.issues
    .map((issue) => {
      if (issue.code === "unrecognized_keys") return `unknown field ${issue.keys.map((k) => `"${k}"`).join(", ")}`;
      return `${issue.path.join(".") || "input"}: ${issue.message}`;
    })
    .join("; ");
}

/** A set of tools by name and alias. */
export class ToolRegistry {
  readonly #byName = new Map<string, ToolDefinition>();

  register(def: ToolDefinition): this {
    for (const name of [def.name, ...(def.aliases ?? [])]) {
      const existing = this.#byName.get(name);
      if (existing && existing !== def) throw new Error(`tool name "${name}" is already registered by ${existing.name}`);
    }
    for (const name of [def.name, ...(def.aliases ?? [])]) this.#byName.set(name, def);
    return this;
  }

  /** Removes a tool and its aliases (tests register short-lived tools). */
  unregister(name: string): void {
    const def = this.#byName.get(name);
    if (!def) return;
    for (const n of [def.name, ...(def.aliases ?? [])]) this.#byName.delete(n);
  }

  /** The tool a name or alias resolves to. */
  get(name: string): ToolDefinition | undefined {
    return this.#byName.get(name);
  }

  /** Every tool once, by canonical name. */
  list(): ToolDefinition[] {
    return [...new Set(this.#byName.values())].sort((a, b) => a.name.localeCompare(b.name));
  }
}

/** The gateway's registry. Built-in tools add themselves in `builtin/index.ts`. */
export const tools = new ToolRegistry();

/**
 * Runs a tool's handler under `ctx.timeoutMs` and an optional outer cancellation (the run's): the handler's
 * signal aborts on either, a timeout becomes a retryable `timeout` outcome, and a throw becomes
 * `internal.error` without its message (reported to `onError` for the log).
 */
export async function invokeTool(
  def: ToolDefinition,
  input: Record<string, unknown>,
  ctx: Omit<ToolContext, "signal">,
  o: { outer?: AbortSignal; onError?: (err: unknown) => void } = {},
): Promise<ToolOutcome> {
  const controller = new AbortController();
  const onAbort = () => controller.abort();
  o.outer?.addEventListener("abort", onAbort);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<ToolOutcome>((resolve) => {
    timer = setTimeout(() => {
      controller.abort();
      resolve({ ok: false, error: { code: "timeout", message: `${def.name} did not finish within ${ctx.timeoutMs} ms`, retryable: true } });
    }, ctx.timeoutMs);
  });
  try {
    return await Promise.race([def.handler(input, { ...ctx, signal: controller.signal }), timeout]);
  } catch (err) {
    o.onError?.(err);
    return { ok: false, error: { code: "internal.error", message: `${def.name} failed unexpectedly` } };
  } finally {
    clearTimeout(timer);
    o.outer?.removeEventListener("abort", onAbort);
  }
}

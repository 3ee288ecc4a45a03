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
import type { ToolError } from "./envelope";
import type { HoneypotConfig } from "./honeypot";

export const RISK_CLASSES = ["read_only", "draft_only", "side_effect"] as const;
export type RiskClass = (typeof RISK_CLASSES)[number];

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
  /** Aborted when the call's `timeout_ms` elapses or the run is cancelled. */
  signal: AbortSignal;
  timeoutMs: number;
}

export type ToolOutcome =
  | { ok: true; output: unknown; summary?: string }
  | { ok: false; error: Pick<ToolError, "code" | "message"> & { retryable?: boolean }; summary?: string };

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
  handler: (input: z.output<S>, ctx: ToolContext) => Promise<ToolOutcome>;
}): ToolDefinition {
  return {
    name: def.name,
    ...(def.aliases ? { aliases: def.aliases } : {}),
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

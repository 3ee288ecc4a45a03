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
import type { ToolError } from "./envelope";

export const RISK_CLASSES = ["read_only", "draft_only", "side_effect"] as const;
export type RiskClass = (typeof RISK_CLASSES)[number];

export interface ToolContext {
  env: Env;
  agentId: string;
  runId: string;
  sessionKey: string;
  toolCallId: string;
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
  /** JSON Schema of the input object (S1 §3.1: no unions where an enum would do, no property named `format`). */
  parameters: Record<string, unknown>;
  risk: RiskClass;
  handler: (input: Record<string, unknown>, ctx: ToolContext) => Promise<ToolOutcome>;
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

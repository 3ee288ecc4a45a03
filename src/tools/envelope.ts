/**
 * S3 §1 tool envelopes, the shape of every tool invocation inside the gateway:
 * the request (`timeout_ms` defaults to 30000 and is clamped by config), the
 * response (`ok=true` ⇔ `error=null`; `output` omitted or empty when `ok=false`)
 * and the standard error with S3's canonical codes.
 */
import { z } from "zod";

export const TOOL_ERROR_CODES = [
  "invalid.request",
  "tool.not_found",
  "tool.input_invalid",
  "policy.denied",
  "sandbox.required",
  "sandbox.unavailable",
  "timeout",
  "internal.error",
] as const;

export const DEFAULT_TOOL_TIMEOUT_MS = 30_000;

export const ToolRequest = z.strictObject({
  request_id: z.string().min(1),
  run_id: z.string().min(1),
  agent_id: z.string().min(1),
  tool: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
  timeout_ms: z.int().positive().default(DEFAULT_TOOL_TIMEOUT_MS),
  created_at: z.iso.datetime(),
});
export type ToolRequest = z.infer<typeof ToolRequest>;

export const ToolError = z.strictObject({
  code: z.enum(TOOL_ERROR_CODES),
  message: z.string().min(1),
  retryable: z.boolean().default(false),
  details: z.record(z.string(), z.unknown()).optional(),
});
export type ToolError = z.infer<typeof ToolError>;

export const ToolResponse = z
  .strictObject({
    request_id: z.string().min(1),
    run_id: z.string().min(1),
    tool: z.string().min(1),
    ok: z.boolean(),
    output: z.unknown().optional(),
    error: ToolError.nullable(),
    duration_ms: z.int().min(0),
    finished_at: z.iso.datetime(),
  })
  .superRefine((r, ctx) => {
    if (r.ok && r.error !== null) ctx.addIssue({ code: "custom", path: ["error"], message: "ok=true requires error=null" });
    if (!r.ok && r.error === null)
      ctx.addIssue({ code: "custom", path: ["error"], message: "ok=false requires error.code and error.message" });
    const empty =
      r.output === undefined || r.output === null || (typeof r.output === "object" && Object.keys(r.output as object).length === 0);
    if (!r.ok && !empty) ctx.addIssue({ code: "custom", path: ["output"], message: "output must be omitted or empty when ok=false" });
  });
export type ToolResponse = z.infer<typeof ToolResponse>;

/** S3 §1.1: `timeout_ms` defaults to 30000 and is clamped to the configured bounds. */
export function clampTimeout(requested: number | undefined, bounds: { min: number; max: number }): number {
  return Math.min(bounds.max, Math.max(bounds.min, requested ?? DEFAULT_TOOL_TIMEOUT_MS));
}

/**
 * The run as the API shows it (S3 §5): the shapes `GET /v1/runs/{run_id}` and the admin's
 * `GET /api/admin/runs/{run_id}` both answer with, and the `{run_id}` path parameter they share.
 */
import { z } from "@hono/zod-openapi";
import { RUN_ID } from "../runs/ids";
import { ErrorEnvelopeSchema as ErrorEnvelope } from "./router";

const ToolExecutionResult = z
  .object({ tool: z.string(), tool_call_id: z.string(), summary: z.string(), output: z.string(), error: z.string() })
  .openapi("ToolExecutionResult");

/** Issue 21 §1: how an automation run ended — its `automation.complete` record, or `missing` for a job run without one. */
export const RunCompletionSchema = z
  .union([
    z.object({
      status: z.literal("recorded"),
      completion_id: z.string(),
      outcome: z.string(),
      summary: z.string().nullable(),
      recorded_at: z.string(),
    }),
    z.object({ status: z.literal("missing") }),
  ])
  .openapi("RunCompletion");

/** A run as S3 §5 shows it (`GET /v1/runs/{run_id}`, and `run` in the admin's detail). */
export const RunSchema = z
  .object({
    id: z.string(),
    agent_id: z.string(),
    source: z.string(),
    status: z.enum(["queued", "running", "awaiting_approval", "completed", "failed", "cancelled"]),
    output: z.string(),
    artifact_path: z.string(),
    duration_ms: z.int(),
    tool_calls: z.int(),
    provider: z.string(),
    model: z.string(),
    trace: z.object({ tool_execution_results: z.array(ToolExecutionResult) }),
    completion: RunCompletionSchema.optional().openapi({
      description: "The run's automation.complete record; `missing` once a job run has ended without one (docs/scheduler.md)",
    }),
  })
  .openapi("Run");

/** One S3 §2 lifecycle event of a run. */
export const RunEventSchema = z
  .object({
    event_id: z.string(),
    event_type: z.string(),
    ts: z.string(),
    run_id: z.string(),
    agent_id: z.string(),
    seq: z.int(),
    payload: z.record(z.string(), z.unknown()),
  })
  .openapi("RunEvent");

/** The `{run_id}` path parameter. */
export const RunIdParam = z.object({ run_id: z.string().regex(RUN_ID, "a run id as returned by POST /v1/runs") });

/** The errors every route addressed by a run id documents. */
export const runErrors = {
  401: { description: "Missing or invalid token", content: { "application/json": { schema: ErrorEnvelope } } },
  404: { description: "No such run", content: { "application/json": { schema: ErrorEnvelope } } },
} as const;

/**
 * The run index and a run in full, for the admin (mounted under /api/admin):
 *   GET /api/admin/runs               the D1 run index, newest first, paged (src/http/admin/paging.ts)
 *   GET /api/admin/runs/{run_id}      the run with its events, trace, prompt manifests and tool-call envelopes
 * Admins reach every run; API callers see theirs at /v1/runs/{run_id} (src/http/v1/runs.ts).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { type ListedRun, listRuns, PREVIEW_CHARS } from "../../runs/index-d1";
import type { SessionDO } from "../../sessions/SessionDO";
import { type AppEnv, createRouter } from "../router";
import { runNotFound, runStub } from "../run-by-id";
import { runErrors as errors, RunEventSchema, RunIdParam, RunSchema } from "../run-schemas";
import { invalidListQuery, keyset, NextCursor, pageQuery } from "./paging";
import { timeRange } from "./time-range";

/** RPC results whose payloads are JSON objects lose their types over the stub; this names it again. */
type RunDetail = Awaited<ReturnType<SessionDO["runDetail"]>>;

const RUN_STATUSES = ["queued", "running", "awaiting_approval", "completed", "failed", "cancelled"] as const;

const RunIndexEntry = z
  .object({
    run_id: z.string(),
    agent_id: z.string(),
    session_key: z.string(),
    session_id: z.string(),
    caller_id: z.string().nullable(),
    source: z.string(),
    status: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
    message_preview: z
      .string()
      .nullable()
      .openapi({
        description: `The user message's first ${PREVIEW_CHARS} characters on one line ("…" when cut), redacted as the transcript stores it; null on runs indexed before this field existed`,
      }),
    output_preview: z
      .string()
      .nullable()
      .openapi({
        description: `The answer's (the guarded output's; a failed run's error message) first ${PREVIEW_CHARS} characters on one line; null while the run has no answer`,
      }),
    duration_ms: z.int().nullable().openapi({ description: "Started → finished, in ms; null while the run has not ended" }),
    rounds: z.int().nullable().openapi({ description: "Tool rounds: model answers that asked for tools (`rounds` of `run.completed`)" }),
    tool_calls: z.int().nullable().openapi({ description: "Tool calls the gateway took on" }),
    tokens: z
      .object({
        prompt: z.int().openapi({ description: "Provider-reported prompt tokens, cached included" }),
        completion: z.int(),
        cached: z.int().openapi({ description: "prompt_tokens_details.cached_tokens, where the provider reports it" }),
        total: z.int().openapi({ description: "prompt + completion" }),
      })
      .openapi({
        description:
          "The run's provider-reported tokens so far (issue 25 §2–3, D-082); 0 on runs that made no model call or were indexed before usage existed",
      }),
    cost: z
      .object({ usd: z.string().openapi({ description: 'USD as an exact decimal string, e.g. "0.00125"', example: "0.00125" }) })
      .nullable()
      .openapi({
        description:
          "The run's cost so far, as in the run view; null when its model has no pricing, a call reported no usage, or it made no model call",
      }),
  })
  .openapi("RunIndexEntry");

/** A time bound of the list: an ISO 8601 date (UTC midnight) or date-time with a zone (`Z` or `±HH:MM`). */
const TIME_BOUND = z.string().optional().openapi({
  example: "2026-11-27T00:00:00Z",
  description: "An ISO 8601 date (`YYYY-MM-DD`, UTC midnight) or date-time with `Z` or an offset",
});
/** Issue 25 §2: the run's provider-reported usage (D-078). */
const RunUsageSchema = z
  .object({
    model: z.string().openapi({ description: "provider:model the run called" }),
    requests: z.number().int().openapi({ description: "Model calls that answered" }),
    unreported_requests: z
      .number()
      .int()
      .openapi({ description: "Of which the provider reported no usage (their tokens are not counted)" }),
    prompt_tokens: z.number().int().openapi({ description: "Provider-reported prompt tokens, cached included" }),
    completion_tokens: z.number().int(),
    cached_tokens: z.number().int().openapi({ description: "prompt_tokens_details.cached_tokens, where the provider reports it" }),
    total_tokens: z.number().int(),
  })
  .openapi("RunUsage");

/** Issue 25 §2: the run's cost; null when its model has no pricing or a call reported no usage. */
const RunCostSchema = z
  .object({ usd: z.string().openapi({ description: 'USD as an exact decimal string, e.g. "0.00125"', example: "0.00125" }) })
  .nullable()
  .openapi("RunCost");

/** The run index pages newest first on (created_at, run_id), which never change once a run is queued. */
const runPages = keyset<ListedRun, [string, string]>("runs", ["string", "string"], (r) => [r.created_at, r.run_id]);

const adminListRoute = createRoute({
  method: "get",
  path: "/runs",
  summary: "List runs (the D1 run index), newest first",
  description:
    "Paged like every list (docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `created_at` then `run_id`, descending. " +
    "`from` ≤ `created_at` < `to`; a bound that is not an ISO 8601 date or zoned date-time, or `from` not before `to`, is 400 `invalid.request`.",
  request: {
    query: z.object({
      agent_id: z.string().optional().openapi({ description: "Only this agent's runs" }),
      status: z.enum(RUN_STATUSES).optional().openapi({ description: "Only runs in this status" }),
      caller_id: z.string().optional().openapi({ description: "Only runs queued by this API caller" }),
      from: TIME_BOUND.openapi({ description: "Only runs created at or after this time (ISO 8601 date or date-time with a zone)" }),
      to: TIME_BOUND.openapi({ description: "Only runs created before this time (ISO 8601 date or date-time with a zone); after `from`" }),
      ...pageQuery(),
    }),
  },
  responses: {
    200: {
      description: "Runs, newest first",
      content: { "application/json": { schema: z.object({ runs: z.array(RunIndexEntry), next_cursor: NextCursor }) } },
    },
    400: invalidListQuery,
    401: errors[401],
  },
});

const adminRunRoute = createRoute({
  method: "get",
  path: "/runs/{run_id}",
  summary: "A run with all its events, its trace, the prompt manifest of each model call and each tool call's S3 §1 envelopes",
  request: { params: RunIdParam },
  responses: {
    200: {
      description: "The run in detail",
      content: {
        "application/json": {
          schema: z.object({
            run: RunSchema,
            events: z.array(RunEventSchema),
            trace: z.array(z.object({ ts: z.number(), kind: z.string(), data: z.record(z.string(), z.unknown()) })),
            manifests: z.array(z.object({ turn_id: z.string(), created_at: z.string(), manifest: z.record(z.string(), z.unknown()) })),
            tool_calls: z.array(
              z.object({ request: z.record(z.string(), z.unknown()).nullable(), response: z.record(z.string(), z.unknown()).nullable() }),
            ),
            usage: RunUsageSchema,
            cost: RunCostSchema,
          }),
        },
      },
    },
    ...errors,
  },
});

/** The admin's run routes. */
export function adminRunRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(adminListRoute, async (c) => {
    const q = c.req.valid("query");
    const { from, to } = timeRange(q.from, q.to);
    const { items, next_cursor } = await runPages.serve(q, (after, limit) =>
      listRuns(c.env.DB, { agentId: q.agent_id, status: q.status, callerId: q.caller_id, from, to, after, limit }),
    );
    return c.json({ runs: items, next_cursor }, 200);
  });

  app.openapi(adminRunRoute, async (c) => {
    const { run_id } = c.req.valid("param");
    const detail = (await runStub(c, run_id).runDetail(run_id)) as unknown as RunDetail;
    if (!detail) throw runNotFound(run_id);
    return c.json(
      {
        run: detail.view as z.infer<typeof RunSchema>,
        events: detail.events,
        trace: detail.trace,
        manifests: detail.manifests.map((m) => ({ turn_id: m.turnId, created_at: m.createdAt, manifest: m.manifest })),
        tool_calls: detail.toolCalls,
        usage: detail.usage,
        cost: detail.cost,
      },
      200,
    );
  });

  return app;
}

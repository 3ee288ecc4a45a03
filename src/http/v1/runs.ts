/**
 * Runs over HTTP (S3 §5, DESIGN §3):
 *   POST /v1/runs                      {agent_id, message} → 202 {id, status:"queued"}, in an isolated `run` session
 *   GET  /v1/runs/{run_id}             S3's run shape
 *   POST /v1/runs/{run_id}/cancel      ends a queued or running run with `run.cancelled`
 *   GET  /v1/runs/{run_id}/events      lifecycle events as Server-Sent Events, from any seq
 *   GET  /api/admin/runs               the D1 run index (admin), newest first, paged (src/http/pagination.ts)
 *   GET  /api/admin/runs/{run_id}      the run with its events, trace and prompt manifests (admin)
 * A run id names the SessionDO that holds it, so none of these scan anything.
 * API callers see only their own runs; another caller's run is "not found".
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import { GatewayError } from "../../errors";
import { apiCallerKey } from "../../runs/caller";
import { eventForApiCaller } from "../../runs/events";
import { RUN_ID, runObjectId } from "../../runs/ids";
import { listRuns, type RunIndexRow } from "../../runs/index-d1";
import { buildRunSpec } from "../../runs/spec";
import { AGENT_ID, formatSessionKey, parseSessionKey, sessionObjectName } from "../../sessions/keys";
import type { SessionDO } from "../../sessions/SessionDO";
import { refuseWhenApprovalsBacklogged } from "../approvals-backlog";
import { requireScope } from "../middleware/auth";
import { IDEMPOTENCY_DESCRIPTION, IdempotencyKeyHeader, idempotencyErrors, idempotencyKey } from "../middleware/idempotency-key";
import { openStreamLease, releaseInBackground } from "../middleware/open-streams";
import { keyset, NextCursor, pageQuery } from "../middleware/pagination";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope, requireJsonBody } from "../router";

export const RunRequest = z
  .strictObject({
    agent_id: z.string().regex(AGENT_ID, "lower-case letters, digits, _ and - (at most 64)"),
    message: z.string().min(1).max(100_000),
    /** S5 session type of the run's new session: `setup` gets the setup task and the setup-only tools. */
    session_type: z.enum(["ordinary", "setup"]).optional(),
  })
  .openapi("RunRequest");

const Queued = z.object({ id: z.string(), status: z.literal("queued") }).openapi("RunQueued");

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

const RunEventSchema = z
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

const RunIdParam = z.object({ run_id: z.string().regex(RUN_ID, "a run id as returned by POST /v1/runs") });
const errors = {
  401: { description: "Missing or invalid token", content: { "application/json": { schema: ErrorEnvelope } } },
  404: { description: "No such run", content: { "application/json": { schema: ErrorEnvelope } } },
} as const;

const postRun = createRoute({
  method: "post",
  path: "/v1/runs",
  summary: "Queue a run of an agent in a fresh, isolated session",
  middleware: [requireScope("api"), requireJsonBody, idempotencyKey()] as const,
  description:
    "Answers 202 at once. With `Prefer: wait=<seconds>` (at most 60) it answers 200 with the finished run if it ends in that time " +
    "(header `Preference-Applied`), and 202 otherwise. " +
    IDEMPOTENCY_DESCRIPTION,
  request: {
    body: { required: true, content: { "application/json": { schema: RunRequest } } },
    headers: z.object({ prefer: z.string().optional(), "idempotency-key": IdempotencyKeyHeader }),
  },
  responses: {
    200: { description: "The run finished within the Prefer: wait time", content: { "application/json": { schema: RunSchema } } },
    202: { description: "Run queued", content: { "application/json": { schema: Queued } } },
    400: { description: "Invalid request", content: { "application/json": { schema: ErrorEnvelope } } },
    403: {
      description: 'session_type "setup" from a caller not listed in setup.allowedCallers',
      content: { "application/json": { schema: ErrorEnvelope } },
    },
    ...idempotencyErrors,
    ...errors,
  },
});

const getRunRoute = createRoute({
  method: "get",
  path: "/v1/runs/{run_id}",
  summary: "A run: status, output, tool executions",
  middleware: [requireScope("api")] as const,
  request: { params: RunIdParam },
  responses: { 200: { description: "The run", content: { "application/json": { schema: RunSchema } } }, ...errors },
});

const cancelRoute = createRoute({
  method: "post",
  path: "/v1/runs/{run_id}/cancel",
  summary: "Cancel a queued or running run",
  middleware: [requireScope("api")] as const,
  request: { params: RunIdParam },
  responses: {
    202: {
      description: "Cancelled (queued run) or cancellation under way (running run)",
      content: { "application/json": { schema: z.object({ id: z.string(), status: z.enum(["cancelled", "running"]) }) } },
    },
    409: { description: "The run has already ended", content: { "application/json": { schema: ErrorEnvelope } } },
    ...errors,
  },
});

const eventsRoute = createRoute({
  method: "get",
  path: "/v1/runs/{run_id}/events",
  summary: "The run's lifecycle events as Server-Sent Events",
  description:
    "Each event is one SSE message: `id` = seq, `event` = event_type, `data` = the event JSON. Starts after `Last-Event-ID` " +
    "(or `?after=`), so a client resumes where it stopped; follows the run until its terminal event unless `follow=false`. " +
    "Counts toward the caller's open event streams (`limits.maxOpenStreamsPerCaller`): past it, 429 `rate.limited`.",
  middleware: [requireScope("api")] as const,
  request: {
    params: RunIdParam,
    query: z.object({
      after: z.coerce.number().int().min(0).optional(),
      follow: z.enum(["true", "false"]).default("true"),
    }),
  },
  responses: {
    200: { description: "An event stream", content: { "text/event-stream": { schema: z.string() } } },
    ...errors,
    429: {
      description: "The caller already has `limits.maxOpenStreamsPerCaller` event streams open",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
  },
});

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
  })
  .openapi("RunIndexEntry");

/** The run index pages newest first on (created_at, run_id), which never change once a run is queued. */
const runPages = keyset<RunIndexRow, [string, string]>("runs", ["string", "string"], (r) => [r.created_at, r.run_id]);

const adminListRoute = createRoute({
  method: "get",
  path: "/api/admin/runs",
  summary: "List runs (the D1 run index), newest first",
  description:
    "Paged like every list (docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `created_at` then `run_id`, descending.",
  middleware: [requireScope("admin")] as const,
  request: {
    query: z.object({
      agent_id: z.string().optional().openapi({ description: "Only this agent's runs" }),
      status: z.enum(RUN_STATUSES).optional().openapi({ description: "Only runs in this status" }),
      caller_id: z.string().optional().openapi({ description: "Only runs queued by this API caller" }),
      ...pageQuery(),
    }),
  },
  responses: {
    200: {
      description: "Runs, newest first",
      content: { "application/json": { schema: z.object({ runs: z.array(RunIndexEntry), next_cursor: NextCursor }) } },
    },
    400: { description: "Invalid query or cursor", content: { "application/json": { schema: ErrorEnvelope } } },
    401: errors[401],
  },
});

const adminRunRoute = createRoute({
  method: "get",
  path: "/api/admin/runs/{run_id}",
  summary: "A run with all its events, its trace, the prompt manifest of each model call and each tool call's S3 §1 envelopes",
  middleware: [requireScope("admin")] as const,
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
          }),
        },
      },
    },
    ...errors,
  },
});

/** How long one long poll for the next event lasts, and how long one stream stays open (clients resume with Last-Event-ID). */
const EVENT_WAIT_MS = 25_000;
const EVENT_STREAM_MAX_MS = 5 * 60_000;

/** `Prefer: wait=<seconds>` (RFC 7240): how long POST /v1/runs may hold the response for the run to finish. */
function preferWait(header: string | undefined): number | null {
  const match = /(?:^|[,;\s])wait=(\d{1,3})(?:$|[,;\s])/.exec(header ?? "");
  return match ? Math.min(60, Number(match[1])) : null;
}

/** RPC results whose payloads are JSON objects lose their types over the stub; these name them again. */
type EventsPage = Awaited<ReturnType<SessionDO["runEvents"]>>;
type RunDetail = Awaited<ReturnType<SessionDO["runDetail"]>>;

function runStub(c: Context<AppEnv>, runId: string): DurableObjectStub<SessionDO> {
  const objectId = runObjectId(runId);
  if (!objectId) throw notFound(runId);
  let id: DurableObjectId;
  try {
    id = c.env.SESSIONS.idFromString(objectId);
  } catch {
    throw notFound(runId); // not an id of this namespace
  }
  return c.env.SESSIONS.get(id);
}

const notFound = (runId: string) => new GatewayError("resource.not_found", `no run ${runId}`);

/** API callers reach only the runs they queued; admins reach every run. */
function callerOf(c: Context<AppEnv>): string | null {
  const principal = c.get("principal");
  return principal?.scope === "api" ? principal.callerId : null;
}

/**
 * A setup session's tools save what the agent's services will run (S5 §6.2), so only callers the operator
 * listed in `setup.allowedCallers` may start one (issue 20 §6).
 */
function refuseSetupUnlessAllowed(allowed: readonly string[], callerId: string): void {
  if (!allowed.includes(callerId))
    throw new GatewayError(
      "auth.forbidden",
      `caller "${callerId}" may not start a setup session: only callers listed in the config's setup.allowedCallers may`,
    );
}

/** The run routes. */
export function runRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(postRun, async (c) => {
    const body = c.req.valid("json");
    const config = c.get("config");
    if (!Object.hasOwn(config.agents, body.agent_id)) throw new GatewayError("resource.not_found", `unknown agent "${body.agent_id}"`);
    const agent = config.agents[body.agent_id] as (typeof config.agents)[string];
    const callerId = callerOf(c) as string;
    if (body.session_type === "setup") refuseSetupUnlessAllowed(config.setup.allowedCallers, callerId);
    await refuseWhenApprovalsBacklogged(c.env.DB, body.agent_id, config.tools.policy.approvals.maxPendingPerAgent, {
      key: apiCallerKey(callerId),
      maxPending: config.tools.policy.approvals.maxPendingPerCaller,
    });
    // An isolated session per run (DESIGN "Session keys": scope `run`), owned by the caller. Under an
    // Idempotency-Key the nonce is the key's attempt token, so a re-attempt reaches the same session (and run).
    const idempotency = c.get("idempotency");
    const nonce = idempotency?.attempt ?? crypto.randomUUID().replaceAll("-", "");
    const key = parseSessionKey(`agent:${body.agent_id}:http:${callerId}:run:${nonce}`);
    if (!key.ok) throw new GatewayError("invalid.request", key.error);
    const session = c.env.SESSIONS.getByName(sessionObjectName(key.key));
    const identity = { sessionKey: formatSessionKey(key.key), agentId: body.agent_id, sessionType: body.session_type ?? "ordinary" };
    const input = {
      message: body.message,
      source: "http",
      limits: agent.session,
      spec: buildRunSpec(config, body.agent_id, "http", c.get("configSource")),
      callerId,
      ...(idempotency ? { dispatchKey: idempotency.dispatchKey } : {}),
    };
    const wait = preferWait(c.req.header("Prefer"));
    if (wait === null) {
      const queued = await session.enqueueMessage(identity, input);
      return c.json({ id: queued.runId, status: "queued" as const }, 202);
    }
    // The caller would rather wait: answer with the finished run if it ends in time (200), else as usual (202).
    // Queued and awaited in one call to the session object (one round trip per turn, not two).
    const { queued, done } = await session.enqueueAndAwait(identity, input, wait * 1000);
    if (done?.finished) {
      c.header("Preference-Applied", `wait=${wait}`);
      return c.json(done.view as z.infer<typeof RunSchema>, 200);
    }
    return c.json({ id: queued.runId, status: "queued" as const }, 202);
  });

  app.openapi(getRunRoute, async (c) => {
    const { run_id } = c.req.valid("param");
    const record = await runStub(c, run_id).runRecord(run_id);
    if (!record || record.callerId !== callerOf(c)) throw notFound(run_id);
    return c.json(record.view as z.infer<typeof RunSchema>, 200);
  });

  app.openapi(cancelRoute, async (c) => {
    const { run_id } = c.req.valid("param");
    const stub = runStub(c, run_id);
    const record = await stub.runRecord(run_id);
    if (!record || record.callerId !== callerOf(c)) throw notFound(run_id);
    const result = await stub.cancelRun(run_id);
    if (!result.ok && result.reason === "not_found") throw notFound(run_id);
    if (!result.ok) throw new GatewayError("conflict", `run ${run_id} has already ended (${result.status})`);
    return c.json({ id: run_id, status: result.status as "cancelled" | "running" }, 202);
  });

  app.openapi(eventsRoute, async (c) => {
    const { run_id } = c.req.valid("param");
    const q = c.req.valid("query");
    const stub = runStub(c, run_id);
    const first = (await stub.runEvents(run_id, 0, 1)) as unknown as EventsPage;
    if (!first || first.callerId !== callerOf(c)) throw notFound(run_id);
    const lastEventId = Number.parseInt(c.req.header("Last-Event-ID") ?? "", 10);
    let after = Number.isSafeInteger(lastEventId) && lastEventId >= 0 ? lastEventId : (q.after ?? 0);
    const follow = q.follow === "true";
    const lease = await openStreamLease(c); // 429 when the caller has its limit of streams open (issue 20 §4)
    return streamSSE(c, async (stream) => {
      const deadline = Date.now() + EVENT_STREAM_MAX_MS;
      let closed = false;
      stream.onAbort(() => {
        closed = true;
        releaseInBackground(c, lease);
      });
      try {
        while (!closed && (await lease.renew())) {
          // Long poll: the object answers at once when events are there, else when the next one is written.
          const wait = follow ? Math.max(0, Math.min(EVENT_WAIT_MS, deadline - Date.now())) : 0;
          const page = (await stub.runEvents(run_id, after, 500, wait)) as unknown as EventsPage;
          if (!page) break;
          for (const e of page.events) {
            // Filtered on the way out, not in storage: admins, audit and bundles keep the prompt hashes.
            await stream.writeSSE({ id: String(e.seq), event: e.event_type, data: JSON.stringify(eventForApiCaller(e)) });
            after = e.seq;
          }
          if (page.events.length === 500) continue;
          if ((page.finished && page.events.length === 0) || !follow || Date.now() >= deadline) break;
          if (page.finished) continue; // drain what the terminal step wrote, then stop
        }
      } finally {
        await lease.release();
      }
    }) as never;
  });

  app.openapi(adminListRoute, async (c) => {
    const q = c.req.valid("query");
    const after = runPages.after(q.cursor);
    const rows = await listRuns(c.env.DB, { agentId: q.agent_id, status: q.status, callerId: q.caller_id, after, limit: q.limit + 1 });
    const { items, next_cursor } = runPages.page(rows, q.limit);
    return c.json({ runs: items, next_cursor }, 200);
  });

  app.openapi(adminRunRoute, async (c) => {
    const { run_id } = c.req.valid("param");
    const detail = (await runStub(c, run_id).runDetail(run_id)) as unknown as RunDetail;
    if (!detail) throw notFound(run_id);
    return c.json(
      {
        run: detail.view as z.infer<typeof RunSchema>,
        events: detail.events,
        trace: detail.trace,
        manifests: detail.manifests.map((m) => ({ turn_id: m.turnId, created_at: m.createdAt, manifest: m.manifest })),
        tool_calls: detail.toolCalls,
      },
      200,
    );
  });

  return app;
}

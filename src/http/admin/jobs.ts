/**
 * Scheduler jobs for admins (S3 §4, DESIGN §3):
 *   GET    /api/admin/jobs                       jobs in job_id order (?agent_id; paged: ?limit ≤ 500, ?cursor → next_cursor)
 *   POST   /api/admin/jobs                       create → 201; 409 when the id exists
 *   GET    /api/admin/jobs/{job_id}              one job
 *   PUT    /api/admin/jobs/{job_id}              replace → 200 (the body's job_id, if given, must match)
 *   DELETE /api/admin/jobs/{job_id}              delete → 200 with the deleted job
 *   GET    /api/admin/jobs/{job_id}/firings      its firings, newest first, with their run ids (paged: ?limit, ?cursor)
 * Every change is an audit event (`job.created`, `job.updated`, `job.deleted`) in the agent's main session stream.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { webhookKey } from "../../channels/standard-webhooks";
import { GatewayError, invalidRequestFromZod } from "../../errors";
import { CHAT_NOTIFY, isChatNotifyChannel } from "../../scheduler/chat-notify";
import {
  createJob,
  deleteJob,
  type FiringRecord,
  getJob,
  JOB_ID,
  type JobRecord,
  JobWrite,
  type JobWriteRefusal,
  listFirings,
  listJobs,
  replaceJob,
} from "../../scheduler/jobs";
import { signingKeyProblem } from "../../scheduler/webhook-keys";
import { requireJsonBody } from "../middleware/json-body";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { RunCompletionSchema } from "../run-schemas";
import { invalidListQuery, keyset, NextCursor, pageQuery } from "./paging";

/** Each notify variant as documented (issue 24 §1 adds the chat channels: Telegram, Slack, Discord — D-071, D-076). */
const NOTIFY_VARIANTS = [
  { channel: "none", title: "JobNotifyNone", target: z.literal("").openapi({ description: "empty" }) },
  {
    channel: "webhook",
    title: "JobNotifyWebhook",
    target: z.string().openapi({ description: "an https URL (not a private address), POSTed a Standard Webhooks signed body" }),
  },
  ...Object.entries(CHAT_NOTIFY).map(([channel, c]) => ({
    channel,
    title: `JobNotify${channel[0]?.toUpperCase()}${channel.slice(1)}`,
    target: z
      .string()
      .regex(c.target)
      .openapi({
        description: `${c.rule}; setting it needs the channel enabled and ${c.secret} set (a PUT may keep the stored one, D-084)`,
      }),
  })),
];

const JobNotify = z
  .union(NOTIFY_VARIANTS.map((v) => z.object({ channel: z.literal(v.channel), target: v.target }).openapi(v.title)))
  .openapi("JobNotify", { description: "Where the run's output goes when a firing's run ends (docs/scheduler.md, Notifications)" });

const Job = z
  .object({
    job_id: z.string(),
    agent_id: z.string(),
    schedule: z.string(),
    message: z.string(),
    mode: z.enum(["isolated", "main_like"]),
    notify: JobNotify,
    enabled: z.boolean(),
    timezone: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
    next_run_at: z.string().nullable(),
    last_fired_at: z.string().nullable(),
  })
  .openapi("Job");

const Firing = z
  .object({
    job_id: z.string(),
    scheduled_for: z.string(),
    agent_id: z.string(),
    status: z.enum(["claimed", "dispatched", "skipped", "failed"]),
    missed: z.int(),
    claimed_at: z.string(),
    attempts: z.int(),
    run_id: z.string().nullable(),
    session_key: z.string().nullable(),
    dispatched_at: z.string().nullable(),
    error: z.string().nullable(),
    run_status: z.string().optional().openapi({ description: "The run's final status; present once the run has ended" }),
    completion: RunCompletionSchema.optional().openapi({
      description: "The run's automation.complete record, or missing when it ended without one; present once the run has ended",
    }),
    notify: z.object({
      channel: z.string(),
      status: z.enum(["none", "pending", "delivered", "failed"]),
      attempts: z.int(),
      error: z.string().nullable(),
      notified_at: z.string().nullable(),
    }),
  })
  .openapi("JobFiring");

/** The write body as documented; the handlers validate it with the scheduler's own schema (JobWrite). */
const JobBody = z
  .object({
    job_id: z.string(),
    agent_id: z.string(),
    schedule: z.string().openapi({ example: "@every 1h" }),
    message: z.string(),
    mode: z.enum(["isolated", "main_like"]),
    // Validated by JobWrite (its messages name the field), so the route takes any shape here and documents the variants.
    notify: z
      .object({ channel: z.string(), target: z.string().optional() })
      .optional()
      .openapi({ allOf: [{ $ref: "#/components/schemas/JobNotify" }], description: "default {channel: none}" }),
    enabled: z.boolean(),
    timezone: z.string().optional(),
  })
  .openapi("JobWrite");

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const unauthorized = { description: "Missing or invalid token", content: json(ErrorEnvelope) };
const notFound = { description: "No such job", content: json(ErrorEnvelope) };
const invalid = { description: "Invalid job", content: json(ErrorEnvelope) };
const JobParam = z.object({ job_id: z.string().regex(JOB_ID, "a job id") });

/** The most jobs one page may hold: more than the other lists' 200, since jobs are few and small. */
const MAX_JOBS_PAGE = 500;

/** Jobs page in job_id order (the primary key); firings newest first on scheduled_for (unique per job). */
const jobPages = keyset<JobRecord, [string]>("jobs", ["string"], (j) => [j.job_id]);
const firingPages = (jobId: string) => keyset<FiringRecord, [string]>(`firings:${jobId}`, ["string"], (f) => [f.scheduled_for]);

const listRoute = createRoute({
  method: "get",
  path: "/jobs",
  summary: "List scheduler jobs in job_id order",
  description: `Paged like every list (docs/api.md, Lists): \`limit\` (here 1–${MAX_JOBS_PAGE}), \`cursor\` → \`next_cursor\`. Order: \`job_id\` ascending.`,
  request: {
    query: z.object({
      agent_id: z.string().optional().openapi({ description: "Only this agent's jobs" }),
      ...pageQuery(MAX_JOBS_PAGE),
    }),
  },
  responses: {
    200: { description: "Jobs in job_id order", content: json(z.object({ jobs: z.array(Job), next_cursor: NextCursor })) },
    400: invalidListQuery,
    401: unauthorized,
  },
});

const createJobRoute = createRoute({
  method: "post",
  path: "/jobs",
  summary: "Create a job (`@every <Go duration>` of at least 1m, or a one-shot RFC3339 time; cron is rejected)",
  middleware: [requireJsonBody] as const,
  request: { body: { required: true, content: json(JobBody) } },
  responses: {
    201: { description: "Created", content: json(Job) },
    400: invalid,
    401: unauthorized,
    409: { description: "A job with this id exists", content: json(ErrorEnvelope) },
  },
});

const getJobRoute = createRoute({
  method: "get",
  path: "/jobs/{job_id}",
  summary: "One job",
  request: { params: JobParam },
  responses: { 200: { description: "The job", content: json(Job) }, 401: unauthorized, 404: notFound },
});

const putJobRoute = createRoute({
  method: "put",
  path: "/jobs/{job_id}",
  summary: "Replace a job; a new schedule starts from now, re-enabling skips the missed windows",
  description:
    "A notify that cannot be delivered now (its channel off, its bot token or webhook secret unset) is refused when set, " +
    "but accepted when the PUT keeps the stored notify exactly, so such a job can be disabled or fixed (docs/scheduler.md).",
  middleware: [requireJsonBody] as const,
  request: { params: JobParam, body: { required: true, content: json(JobBody) } },
  responses: {
    200: { description: "Replaced", content: json(Job) },
    400: invalid,
    401: unauthorized,
    404: notFound,
    409: { description: "Changed by someone else meanwhile; read it again", content: json(ErrorEnvelope) },
  },
});

const deleteJobRoute = createRoute({
  method: "delete",
  path: "/jobs/{job_id}",
  summary: "Delete a job and its firing records (runs and the audit log keep the history)",
  request: { params: JobParam },
  responses: { 200: { description: "Deleted", content: json(z.object({ deleted: Job })) }, 401: unauthorized, 404: notFound },
});

const firingsRoute = createRoute({
  method: "get",
  path: "/jobs/{job_id}/firings",
  summary: "A job's firings with their run ids and notification outcomes, newest first",
  description:
    "Paged like every list (docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `scheduled_for` descending; " +
    "a cursor is valid only for the job it came from. An unknown job has no firings (an empty list).",
  request: { params: JobParam, query: z.object(pageQuery()) },
  responses: {
    200: { description: "Firings, newest first", content: json(z.object({ firings: z.array(Firing), next_cursor: NextCursor })) },
    400: { description: "Invalid job id, query or cursor", content: json(ErrorEnvelope) },
    401: unauthorized,
  },
});

/**
 * A write body validated with the scheduler's schema and the agent checked; `unavailable`: why its notify cannot be
 * delivered under the config and secrets in force (a channel off, a secret unset), or null. Malformed targets are
 * refused here, always; an unavailable notify is refused unless a PUT keeps the stored one exactly (D-084).
 */
async function validWrite(c: Context<AppEnv>): Promise<{ job: JobWrite; unavailable: GatewayError | null }> {
  const body: unknown = await c.req.json();
  const parsed = JobWrite.safeParse(body);
  if (!parsed.success) throw invalidRequestFromZod(parsed.error, "body", body);
  const job = parsed.data;
  if (!Object.hasOwn(c.get("config").agents, job.agent_id)) {
    throw new GatewayError("invalid.request", `agent_id: unknown agent "${job.agent_id}"`);
  }
  return { job, unavailable: await notifyUnavailable(c, job.notify.channel) };
}

/**
 * Why a job cannot report to `channel` now: webhooks need their master secret and the gateway's signing key (D-089),
 * a chat its enabled channel and bot token.
 */
async function notifyUnavailable(c: Context<AppEnv>, channel: string): Promise<GatewayError | null> {
  if (channel === "webhook") return webhookUnavailable(c.env);
  if (!isChatNotifyChannel(channel)) return null;
  if (!c.get("config").channels[channel].enabled) {
    return new GatewayError(
      "invalid.request",
      `notify.channel: the ${channel} channel is not enabled in the configuration in force (channels.${channel}.enabled)`,
    );
  }
  const secret = CHAT_NOTIFY[channel].secret;
  if (!c.env[secret]) {
    return new GatewayError(
      "invalid.request",
      `notify.channel: ${channel} reports need the ${secret} secret, which is not set on this gateway`,
    );
  }
  return null;
}

async function webhookUnavailable(env: Env): Promise<GatewayError | null> {
  if (!webhookKey(env.SCHEDULER_WEBHOOK_SECRET)) {
    return new GatewayError(
      "invalid.request",
      "notify.channel: webhook notifications need the SCHEDULER_WEBHOOK_SECRET secret (whsec_…), which is not set on this gateway",
    );
  }
  const problem = await signingKeyProblem(env);
  return problem ? new GatewayError("invalid.request", `notify.channel: webhook notifications cannot be signed: ${problem}`) : null;
}

function refused(r: JobWriteRefusal, jobId: string): GatewayError {
  switch (r.reason) {
    case "exists":
      return new GatewayError("conflict", `job ${jobId} already exists; PUT /api/admin/jobs/${jobId} replaces it`);
    case "not_found":
      return new GatewayError("resource.not_found", `no job ${jobId}`);
    case "changed":
      return new GatewayError("conflict", `job ${jobId} changed while it was being replaced; read it again and retry`);
    case "notify_changed": // only ever asked for with an unavailable notify, whose own error the route throws instead
      return new GatewayError("invalid.request", "notify: the job's notify cannot be changed to one that is not available");
    case "past":
      return new GatewayError("invalid.request", `schedule: ${r.message}`);
  }
}

/**
 * Records a job change in the agent's main-session audit stream; `notifyUnavailable`: why the notify it kept cannot be
 * delivered now (D-084), so the log says the job was saved knowing its reports will fail.
 */
async function auditJob(c: Context<AppEnv>, eventType: string, job: JobRecord, notifyUnavailable?: string): Promise<void> {
  const sessionKey = `agent:${job.agent_id}:main`;
  await c.env.SESSIONS.getByName(sessionKey).recordAuditEvent({ sessionKey, agentId: job.agent_id }, eventType, "admin", {
    job: { ...job },
    ...(notifyUnavailable ? { notify_unavailable: notifyUnavailable } : {}),
  });
}

/** The job routes. */
export function adminJobRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(listRoute, async (c) => {
    const q = c.req.valid("query");
    const { items, next_cursor } = await jobPages.serve(q, (after, limit) =>
      listJobs(c.env.DB, { agentId: q.agent_id, after: after?.[0], limit }),
    );
    return c.json({ jobs: items, next_cursor }, 200);
  });

  app.openapi(createJobRoute, async (c) => {
    const { job, unavailable } = await validWrite(c);
    if (unavailable) throw unavailable;
    const result = await createJob(c.env.DB, job, new Date());
    if (!result.ok) throw refused(result, job.job_id);
    await auditJob(c, "job.created", result.job);
    return c.json(result.job, 201);
  });

  app.openapi(getJobRoute, async (c) => {
    const { job_id } = c.req.valid("param");
    const job = await getJob(c.env.DB, job_id);
    if (!job) throw new GatewayError("resource.not_found", `no job ${job_id}`);
    return c.json(job, 200);
  });

  app.openapi(putJobRoute, async (c) => {
    const { job_id } = c.req.valid("param");
    const { job, unavailable } = await validWrite(c);
    if (job.job_id !== job_id) throw new GatewayError("invalid.request", `job_id: the body says ${job.job_id}, the path ${job_id}`);
    // A notify that cannot be delivered now is still accepted when it is the one stored (D-084): an operator can then
    // disable the job, or change its schedule or message, after its channel was turned off; its firings' reports fail
    // and say why. Setting one (a new channel or target) is refused with the reason, as a POST is.
    const result = await replaceJob(c.env.DB, job_id, job, new Date(), { keepNotify: unavailable !== null });
    if (!result.ok) throw unavailable && ["notify_changed", "not_found"].includes(result.reason) ? unavailable : refused(result, job_id);
    await auditJob(c, "job.updated", result.job, unavailable?.message);
    return c.json(result.job, 200);
  });

  app.openapi(deleteJobRoute, async (c) => {
    const { job_id } = c.req.valid("param");
    const deleted = await deleteJob(c.env.DB, job_id);
    if (!deleted) throw new GatewayError("resource.not_found", `no job ${job_id}`);
    await auditJob(c, "job.deleted", deleted);
    return c.json({ deleted }, 200);
  });

  app.openapi(firingsRoute, async (c) => {
    const { job_id } = c.req.valid("param");
    const q = c.req.valid("query");
    const { items, next_cursor } = await firingPages(job_id).serve(q, (after, limit) =>
      listFirings(c.env.DB, job_id, { before: after?.[0], limit }),
    );
    return c.json({ firings: items, next_cursor }, 200);
  });

  return app;
}

/**
 * `POST /api/admin/setup-sessions` (issue 20 §6): an admin starts an S5 setup session for an agent.
 *
 * A setup session's tools save what the agent's services will run, so only the admin scope (here) or an API
 * caller listed in `setup.allowedCallers` (`POST /v1/runs` with `session_type: "setup"`) may start one. The
 * session is isolated (scope `run`), keyed on a channel of its own (`admin`) so it never shares a key with an
 * API caller's runs, and owned by no API caller: the admin follows it with `GET /api/admin/runs/{run_id}`.
 * Its writes that change what will be executed still wait for an approval like any other run's.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GatewayError } from "../../errors";
import { submitTurn } from "../../runs/submit";
import { findSessionKey } from "../../sessions/index-d1";
import { AGENT_ID, parseSessionKey, SESSION_ID } from "../../sessions/keys";
import { requireJsonBody } from "../middleware/json-body";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { providerReady, sessionKeyOrThrow, submitContext } from "../turns";

/** The caller key an admin's setup runs count against for per-caller limits (src/runs/caller.ts). */
export const ADMIN_CALLER_KEY = "admin";

export const SetupSessionRequest = z
  .strictObject({
    agent_id: z.string().regex(AGENT_ID, "lower-case letters, digits, _ and - (at most 64)"),
    message: z.string().min(1).max(100_000),
    session_id: z.string().regex(SESSION_ID, "a session id (ses_…)").optional().openapi({
      description:
        "Continue this setup session (one an admin started for the same agent) with a next message instead of starting a new one",
    }),
  })
  .openapi("SetupSessionRequest");

const SetupSessionQueued = z
  .object({ id: z.string(), status: z.literal("queued"), session_key: z.string(), session_id: z.string() })
  .openapi("SetupSessionQueued");

const json = (schema: z.ZodType) => ({ "application/json": { schema } });

const startSetup = createRoute({
  method: "post",
  path: "/setup-sessions",
  summary: "Start an S5 setup session for an agent (admin); follow the run at /api/admin/runs/{run_id}",
  middleware: [requireJsonBody] as const,
  request: { body: { required: true, content: { "application/json": { schema: SetupSessionRequest } } } },
  responses: {
    202: { description: "Setup session created, its run queued", content: json(SetupSessionQueued) },
    400: { description: "Invalid request", content: json(ErrorEnvelope) },
    401: { description: "Missing or invalid token", content: json(ErrorEnvelope) },
    403: { description: "Not an admin token", content: json(ErrorEnvelope) },
    404: { description: "Unknown agent, or no admin setup session `session_id` of that agent", content: json(ErrorEnvelope) },
    410: { description: "`session_id` is an archived generation", content: json(ErrorEnvelope) },
    429: { description: "Too many approvals pending for the agent", content: json(ErrorEnvelope) },
  },
});

/**
 * Issue 21 §2: the key of the admin setup session `sessionId` of `agentId`, to post its next message (a setup
 * session can continue after `request_env_variables`). 404 unless it is one an admin started for that agent
 * (an API caller's session cannot be taken over), 410 for an archived generation.
 */
async function existingSetupKey(env: AppEnv["Bindings"], agentId: string, sessionId: string): Promise<string> {
  const owner = await findSessionKey(env.DB, sessionId);
  const parsed = owner ? parseSessionKey(owner.sessionKey) : undefined;
  const k = parsed?.ok ? parsed.key : undefined;
  const adminKey = k && k.kind !== "main" && k.channel === "admin" && k.accountId === "operator" && k.scope === "run";
  if (!owner || owner.agentId !== agentId || !adminKey)
    throw new GatewayError("resource.not_found", `no admin setup session ${sessionId} of agent "${agentId}"`);
  const info = await env.SESSIONS.getByName(owner.sessionKey).sessionInfo(owner);
  if (info.sessionType !== "setup")
    throw new GatewayError("resource.not_found", `no admin setup session ${sessionId} of agent "${agentId}"`);
  if (info.sessionId !== sessionId) throw new GatewayError("gone", `session ${sessionId} was archived`);
  return owner.sessionKey;
}

/** The admin's setup-session route. */
export function adminSetupRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(startSetup, async (c) => {
    const body = c.req.valid("json");
    const config = c.get("config");
    const agent = Object.hasOwn(config.agents, body.agent_id) ? config.agents[body.agent_id] : undefined;
    if (!agent) throw new GatewayError("resource.not_found", `unknown agent "${body.agent_id}"`);
    await providerReady(c);
    const { queued, sessionKey } = await submitTurn(submitContext(c), {
      agentId: body.agent_id,
      // Looked up only once the backlog check has passed: a refused request reads nothing.
      session: async () =>
        sessionKeyOrThrow(
          body.session_id
            ? await existingSetupKey(c.env, body.agent_id, body.session_id)
            : `agent:${body.agent_id}:admin:operator:run:${crypto.randomUUID().replaceAll("-", "")}`,
        ),
      sessionType: "setup",
      message: body.message,
      source: "admin",
      channel: "http",
      callerKey: ADMIN_CALLER_KEY,
      refuseWhenBacklogged: { callerKey: ADMIN_CALLER_KEY },
    });
    return c.json({ id: queued.runId, status: "queued" as const, session_key: sessionKey, session_id: queued.sessionId }, 202);
  });
  return app;
}

/**
 * `POST /v1/chat/messages` (S3 §5): a chat message from an API caller.
 * Maps to the session `agent:{agent_id}:http:{caller}~{room_id}:dm:{user_id}` — the
 * authenticated caller's own conversation, never another caller's —, stores the
 * message and queues a run (202), or runs the `/new` and `/resume` commands at
 * once (200), which therefore only reach that caller's generations.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { GatewayError } from "../../errors";
import { requestCallerKey } from "../../runs/caller";
import { RunNotifyRequest, runNotifySpec } from "../../runs/notify-request";
import { submitTurn } from "../../runs/submit";
import { AGENT_ID, formatSessionKey, httpChatSessionKey, KEY_PART, SESSION_ID, sessionObjectName } from "../../sessions/keys";
import type { SessionIdentity } from "../../sessions/SessionDO";
import { keyTurnFields, requireAgent } from "../middleware/api-keys";
import { requireScope } from "../middleware/auth";
import { bodyField, IDEMPOTENCY_DESCRIPTION, IdempotencyKeyHeader, idempotencyErrors, idempotencyKey } from "../middleware/idempotency-key";
import { requireJsonBody } from "../middleware/json-body";
import type { Principal } from "../middleware/principal";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { providerReady, submitContext } from "../turns";

type ApiPrincipal = Extract<Principal, { scope: "api" }>;

const IdPart = z.string().regex(KEY_PART, "1-128 characters of letters, digits and + . _ @ = -");

export const ChatMessageRequest = z
  .strictObject({
    user_id: IdPart,
    room_id: IdPart,
    agent_id: z.string().regex(AGENT_ID, "lower-case letters, digits, _ and - (at most 64)"),
    message: z.string().min(1).max(100_000),
    /** Issue 24 §5: a completion webhook for the run the message queues (ignored by /new and /resume). */
    notify: RunNotifyRequest.optional(),
  })
  .openapi("ChatMessageRequest");

const Queued = z.object({ id: z.string(), status: z.literal("queued"), session_id: z.string() }).openapi("ChatMessageQueued");
const Immediate = z.object({ response: z.string(), session_id: z.string() }).openapi("ChatCommandResponse");

const postMessage = createRoute({
  method: "post",
  path: "/chat/messages",
  summary: "Send a chat message (queues a run), or /new and /resume <session_id>",
  middleware: [requireScope("api"), requireJsonBody, idempotencyKey(chatReplayGuard)] as const,
  description:
    "With `notify: {url}` the queued run's view is POSTed to that https URL, signed with Standard Webhooks, when the run ends " +
    "or waits for an approval (docs/api.md, Completion webhooks). " +
    IDEMPOTENCY_DESCRIPTION,
  request: {
    body: { required: true, content: { "application/json": { schema: ChatMessageRequest } } },
    headers: z.object({ "idempotency-key": IdempotencyKeyHeader }),
  },
  responses: {
    200: { description: "/new or /resume answered at once", content: { "application/json": { schema: Immediate } } },
    202: { description: "Message stored, run queued", content: { "application/json": { schema: Queued } } },
    400: { description: "Invalid request", content: { "application/json": { schema: ErrorEnvelope } } },
    401: { description: "Missing or invalid token", content: { "application/json": { schema: ErrorEnvelope } } },
    403: {
      description: "Not an API token, or a key that may not use this agent",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
    404: { description: "Unknown agent or session", content: { "application/json": { schema: ErrorEnvelope } } },
    429: {
      description: "The key's requests per minute or tokens per day are spent (`Retry-After`), or too many approvals are pending",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
    ...idempotencyErrors,
  },
});

/** The 403s of a chat message for a configured agent, in the route's order; narrows the principal to an API caller. */
function authorizeChat(principal: Principal | undefined, agentId: string): asserts principal is ApiPrincipal {
  // requireScope("api") let only API callers in; the caller id is part of the key (issue 20 §1).
  if (principal?.scope !== "api") throw new GatewayError("auth.forbidden", "this route needs an API token");
  requireAgent(principal, agentId); // issue 25 §1: a key record names the agents it may use
}

/** Issue 33 (D-087): the same 403s before an Idempotency-Key replay; an unknown agent is the route's 404. */
function chatReplayGuard(c: Context<AppEnv>, body: unknown): void {
  const agentId = bodyField(body, "agent_id");
  if (typeof agentId === "string" && Object.hasOwn(c.get("config").agents, agentId)) authorizeChat(c.get("principal"), agentId);
}

/** The chat routes (api scope). */
export function chatRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(postMessage, async (c) => {
    const body = c.req.valid("json");
    const config = c.get("config");
    const agent = Object.hasOwn(config.agents, body.agent_id) ? config.agents[body.agent_id] : undefined;
    if (!agent) throw new GatewayError("resource.not_found", `unknown agent "${body.agent_id}"`);
    const principal = c.get("principal");
    authorizeChat(principal, body.agent_id);
    const notify = body.notify ? await runNotifySpec(body.notify, c.env, config) : null; // refused before anything is queued
    const key = httpChatSessionKey(body.agent_id, principal.callerId, body.room_id, body.user_id);
    if (!key.ok) throw new GatewayError("invalid.request", key.error);
    const identity: SessionIdentity = { sessionKey: formatSessionKey(key.key), agentId: body.agent_id };
    const session = c.env.SESSIONS.getByName(sessionObjectName(key.key));

    const command = body.message.trim();
    if (command === "/new") {
      const r = await session.newSession(identity);
      if (!r.ok) throw archiveFailed();
      return c.json(
        {
          response: `Started a new session. The previous one (${r.previousSessionId}) is archived; /resume ${r.previousSessionId} brings it back.`,
          session_id: r.sessionId,
        },
        200,
      );
    }
    if (command === "/resume" || command.startsWith("/resume ")) {
      const target = command.slice("/resume".length).trim();
      if (!SESSION_ID.test(target)) throw new GatewayError("invalid.request", "usage: /resume <session_id>");
      const r = await session.resumeSession(identity, target);
      if (!r.ok && r.reason === "not_found") throw new GatewayError("resource.not_found", `no session ${target} in this conversation`);
      if (!r.ok) throw archiveFailed();
      return c.json({ response: `Resumed session ${r.sessionId}.`, session_id: r.sessionId }, 200);
    }

    // Under an Idempotency-Key, a re-attempt of the same use of the key returns the run the first one queued.
    const idempotency = c.get("idempotency");
    await providerReady(c);
    const { queued } = await submitTurn(submitContext(c), {
      agentId: body.agent_id,
      session: key.key,
      message: body.message,
      source: "http",
      channel: "http",
      callerId: principal.callerId,
      refuseWhenBacklogged: { callerKey: requestCallerKey(principal.callerId, body.agent_id) },
      ...keyTurnFields(principal),
      ...(idempotency ? { dispatchKey: idempotency.dispatchKey } : {}),
      ...(notify ? { notify } : {}),
    });
    return c.json({ id: queued.runId, status: "queued" as const, session_id: queued.sessionId }, 202);
  });
  return app;
}

function archiveFailed(): GatewayError {
  return new GatewayError("internal.error", "could not archive the current session, so nothing was changed; try again", { status: 503 });
}

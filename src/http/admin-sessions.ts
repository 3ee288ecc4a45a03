/**
 * Admin views of sessions (S3 §5 "Dashboard Admin APIs"):
 * `GET /api/admin/chat/sessions` (filters: agent, user, room, channel) and
 * `GET /api/admin/chat/sessions/{session_id}/messages` (ordered, with tool metadata).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { findSessionKey, listSessions } from "../sessions/index-d1";
import { SESSION_ID } from "../sessions/keys";
import { TranscriptRow } from "../sessions/transcript";
import { requireScope } from "./auth";
import { GatewayError } from "./errors";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "./router";

const SessionSummary = z
  .object({
    session_key: z.string(),
    agent_id: z.string(),
    channel: z.string(),
    room_id: z.string(),
    user_id: z.string(),
    scope: z.string(),
    session_id: z.string(),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .openapi("SessionSummary");

/** A transcript row as admins see it: everything but the generation id (in the envelope) and redaction paths. */
const Message = TranscriptRow.omit({ session_id: true, redactions: true }).openapi("SessionMessage");

const listRoute = createRoute({
  method: "get",
  path: "/api/admin/chat/sessions",
  summary: "List chat sessions",
  middleware: [requireScope("admin")] as const,
  request: {
    query: z.object({
      agent_id: z.string().optional(),
      user_id: z.string().optional(),
      room_id: z.string().optional(),
      channel: z.string().optional(),
      limit: z.coerce.number().int().min(1).max(200).default(50),
    }),
  },
  responses: {
    200: {
      description: "Sessions, most recently active first",
      content: { "application/json": { schema: z.object({ sessions: z.array(SessionSummary) }) } },
    },
    401: { description: "Missing or invalid token", content: { "application/json": { schema: ErrorEnvelope } } },
  },
});

const messagesRoute = createRoute({
  method: "get",
  path: "/api/admin/chat/sessions/{session_id}/messages",
  summary: "The ordered messages of one session generation",
  middleware: [requireScope("admin")] as const,
  request: { params: z.object({ session_id: z.string().regex(SESSION_ID) }) },
  responses: {
    200: {
      description: "Messages in order",
      content: {
        "application/json": { schema: z.object({ session_id: z.string(), session_key: z.string(), messages: z.array(Message) }) },
      },
    },
    404: { description: "No such session", content: { "application/json": { schema: ErrorEnvelope } } },
  },
});

/** Admin session routes. */
export function adminSessionRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(listRoute, async (c) => {
    const q = c.req.valid("query");
    const sessions = await listSessions(c.env.DB, {
      agentId: q.agent_id,
      userId: q.user_id,
      roomId: q.room_id,
      channel: q.channel,
      limit: q.limit,
    });
    return c.json({ sessions }, 200);
  });
  app.openapi(messagesRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    const owner = await findSessionKey(c.env.DB, session_id);
    if (!owner) throw new GatewayError("resource.not_found", `no session ${session_id}`);
    const rows = await c.env.SESSIONS.getByName(owner.sessionKey).messages(session_id);
    if (!rows) throw new GatewayError("resource.not_found", `no session ${session_id}`);
    const messages = rows.map(({ seq, role, content, ts, run_id, tool_name, tool_call_id }) => ({
      seq,
      role,
      content,
      ts,
      run_id,
      tool_name,
      tool_call_id,
    }));
    return c.json({ session_id, session_key: owner.sessionKey, messages }, 200);
  });
  return app;
}

/**
 * Admin views of sessions (S3 §5 "Dashboard Admin APIs"), paged like every list (src/http/admin/paging.ts):
 * `GET /api/admin/chat/sessions` (filters: agent, user, room, channel), newest first,
 * `GET /api/admin/chat/generations`: every generation (session_id) of those sessions, current and archived, and
 * `GET /api/admin/chat/sessions/{session_id}/messages` (in transcript order, with tool metadata), and
 * `GET /api/admin/chat/sessions/{session_id}/transcript`: the whole generation as JSONL (DESIGN §4 "exportable
 * as JSONL"; S1 §5.2 line shape, redactions included), archived parts and all.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GatewayError } from "../../errors";
import {
  findSessionKey,
  type GenerationSummary as GenerationRow,
  listGenerations,
  listSessions,
  type SessionSummary as SessionRow,
} from "../../sessions/index-d1";
import { SESSION_ID } from "../../sessions/keys";
import { TranscriptRow } from "../../sessions/transcript";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { invalidListQuery as invalid, keyset, NextCursor, pageQuery } from "./paging";

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

const GenerationSummary = z
  .object({
    session_id: z.string(),
    session_key: z.string(),
    status: z
      .enum(["current", "archived"])
      .openapi({ description: "`current`: the generation the key's messages go to; `archived`: one `/resume` can bring back" }),
    agent_id: z.string(),
    channel: z.string(),
    room_id: z.string(),
    user_id: z.string(),
    scope: z.string(),
    started_at: z.string(),
  })
  .openapi("GenerationSummary");

/** A transcript row as admins see it: everything but the generation id (in the envelope) and redaction paths. */
const Message = TranscriptRow.omit({ session_id: true, redactions: true }).openapi("SessionMessage");
type Message = z.infer<typeof Message>;

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const unauthorized = { description: "Missing or invalid token", content: json(ErrorEnvelope) };

/** Sessions page newest first on (created_at, session_key), which never change for a session. */
const sessionPages = keyset<SessionRow, [string, string]>("sessions", ["string", "string"], (s) => [s.created_at, s.session_key]);

/** Generations page newest first on (started_at, session_id), which never change for a generation. */
const generationPages = keyset<GenerationRow, [string, string]>("generations", ["string", "string"], (g) => [g.started_at, g.session_id]);

/** The filters both session lists share. */
const sessionFilters = {
  agent_id: z.string().optional().openapi({ description: "Only this agent's sessions" }),
  user_id: z.string().optional().openapi({ description: "Only sessions of this user (the peer of a dm session)" }),
  room_id: z.string().optional().openapi({ description: "Only sessions in this room (the channel account)" }),
  channel: z
    .string()
    .optional()
    .openapi({ description: "Only sessions of this channel (http, telegram, slack, …; main: agents' main sessions)" }),
};

/** One generation's messages page in transcript order on seq; a cursor belongs to that generation. */
const messagePages = (sessionId: string) => keyset<Message, [number]>(`messages:${sessionId}`, ["number"], (m) => [m.seq]);

const listRoute = createRoute({
  method: "get",
  path: "/chat/sessions",
  summary: "List chat sessions, newest first",
  description:
    "Paged like every list (docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `created_at` then `session_key`, descending. " +
    "Filters combine (AND).",
  request: {
    query: z.object({ ...sessionFilters, ...pageQuery() }),
  },
  responses: {
    200: {
      description: "Sessions, newest first",
      content: json(z.object({ sessions: z.array(SessionSummary), next_cursor: NextCursor })),
    },
    400: invalid,
    401: unauthorized,
  },
});

const generationsRoute = createRoute({
  method: "get",
  path: "/chat/generations",
  summary: "List every generation (session_id) of chat sessions, current and archived, newest first",
  description:
    "One row per generation, not per session key: `/new` archives the current generation and starts another, `/resume` brings an archived one back. " +
    "Paged like every list (docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `started_at` then `session_id`, descending. " +
    "Filters combine (AND).",
  request: {
    query: z.object({
      ...sessionFilters,
      session_key: z.string().optional().openapi({ description: "Only the generations of this session key" }),
      status: z.enum(["current", "archived"]).optional().openapi({ description: "Only current or only archived generations" }),
      ...pageQuery(),
    }),
  },
  responses: {
    200: {
      description: "Generations, newest first",
      content: json(z.object({ generations: z.array(GenerationSummary), next_cursor: NextCursor })),
    },
    400: invalid,
    401: unauthorized,
  },
});

const messagesRoute = createRoute({
  method: "get",
  path: "/chat/sessions/{session_id}/messages",
  summary: "The messages of one session generation, in transcript order",
  description:
    "Paged like every list (docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `seq` ascending, archived parts included; " +
    "a cursor is valid only for the session it came from.",
  request: { params: z.object({ session_id: z.string().regex(SESSION_ID) }), query: z.object(pageQuery()) },
  responses: {
    200: {
      description: "Messages in order",
      content: json(z.object({ session_id: z.string(), session_key: z.string(), messages: z.array(Message), next_cursor: NextCursor })),
    },
    400: invalid,
    401: unauthorized,
    404: { description: "No such session", content: json(ErrorEnvelope) },
  },
});

const transcriptRoute = createRoute({
  method: "get",
  path: "/chat/sessions/{session_id}/transcript",
  summary: "One session generation's whole transcript as JSONL",
  description:
    "One S1 §5.2 transcript line per message, in seq order, with the fixed key order `seq, session_id, role, content, ts, run_id, tool_name, tool_call_id, redactions` — the same lines the gateway archives to R2.",
  request: { params: z.object({ session_id: z.string().regex(SESSION_ID) }) },
  responses: {
    200: { description: "JSONL, one message per line", content: { "application/x-ndjson": { schema: z.string() } } },
    400: invalid,
    401: unauthorized,
    404: { description: "No such session", content: json(ErrorEnvelope) },
  },
});

/** Admin session routes. */
export function adminSessionRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(listRoute, async (c) => {
    const q = c.req.valid("query");
    const { items, next_cursor } = await sessionPages.serve(q, (after, limit) =>
      listSessions(c.env.DB, { agentId: q.agent_id, userId: q.user_id, roomId: q.room_id, channel: q.channel, after, limit }),
    );
    return c.json({ sessions: items, next_cursor }, 200);
  });
  app.openapi(generationsRoute, async (c) => {
    const q = c.req.valid("query");
    const { items, next_cursor } = await generationPages.serve(q, (after, limit) =>
      listGenerations(c.env.DB, {
        agentId: q.agent_id,
        userId: q.user_id,
        roomId: q.room_id,
        channel: q.channel,
        sessionKey: q.session_key,
        status: q.status,
        after,
        limit,
      }),
    );
    return c.json({ generations: items, next_cursor }, 200);
  });
  app.openapi(messagesRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    const q = c.req.valid("query");
    let sessionKey = "";
    // A bad cursor is 400 before the session is looked up (an unknown one is 404).
    const { items, next_cursor } = await messagePages(session_id).serve(q, async (after, limit) => {
      const owner = await findSessionKey(c.env.DB, session_id);
      if (!owner) throw new GatewayError("resource.not_found", `no session ${session_id}`);
      sessionKey = owner.sessionKey;
      const rows = await c.env.SESSIONS.getByName(sessionKey).messages(session_id, { afterSeq: after?.[0] ?? 0, limit });
      if (!rows) throw new GatewayError("resource.not_found", `no session ${session_id}`);
      return rows.map(({ seq, role, content, ts, run_id, tool_name, tool_call_id }) => ({
        seq,
        role,
        content,
        ts,
        run_id,
        tool_name,
        tool_call_id,
      }));
    });
    return c.json({ session_id, session_key: sessionKey, messages: items, next_cursor }, 200);
  });
  app.openapi(transcriptRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    const owner = await findSessionKey(c.env.DB, session_id);
    const body = owner ? await c.env.SESSIONS.getByName(owner.sessionKey).exportTranscript(session_id) : null;
    if (body === null) throw new GatewayError("resource.not_found", `no session ${session_id}`);
    return new Response(body, {
      headers: { "content-type": "application/x-ndjson", "content-disposition": `attachment; filename="${session_id}.jsonl"` },
    }) as never;
  });
  return app;
}

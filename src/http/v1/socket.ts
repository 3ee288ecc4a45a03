/**
 * `GET /v1/chat/socket?agent_id&room_id&user_id` (issue 23, docs/decisions.md D-053): one WebSocket per
 * conversation, into the conversation's SessionDO. The conversation is the one `POST /v1/chat/messages` reaches —
 * `agent:{agent_id}:http:{caller}~{room_id}:dm:{user_id}`, the authenticated caller's own — and every turn sent over
 * the socket is governed like that route's (src/sessions/websocket.ts submits it through src/runs/submit.ts).
 *
 * Everything is checked here, at the upgrade, before a socket exists: the api token (401/403 in the S3 envelope),
 * the agent, the ids, the caller's open-stream cap (a socket holds one slot, 429 past it). An API key record's limits
 * and standing are then the session object's to hold frame by frame (D-086). Browsers cannot set an
 * Authorization header on a WebSocket, so the token may come as a subprotocol instead, `bearer.<base64url(token)>`
 * beside `sophie.v1` (the way Kubernetes' API server takes one): never in the URL, which ends up in logs, caches
 * and history (the query is refused with a token in it, as everywhere). The answer selects `sophie.v1` only.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { MiddlewareHandler } from "hono";
import { GatewayError } from "../../errors";
import { AGENT_ID, httpChatSessionKey, KEY_PART, sessionObjectName } from "../../sessions/keys";
import { SOCKET_PROTOCOL, SocketMessageFrame } from "../../sessions/socket-frames";
import { SOCKET_GRANT_HEADER, type SocketGrant } from "../../sessions/websocket";
import { requireAgent } from "../middleware/api-keys";
import { requireScope } from "../middleware/auth";
import { idempotencyObjectName } from "../middleware/idempotency-key";
import { openStreamLease } from "../middleware/open-streams";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { providerReady } from "../turns";
import { SocketServerFrame } from "./socket-frames";

/** The subprotocol prefix that carries a browser's token, base64url-encoded (a subprotocol cannot hold `/` or `=`). */
export const BEARER_SUBPROTOCOL_PREFIX = "bearer.";

const IdPart = z.string().regex(KEY_PART, "1-128 characters of letters, digits and + . _ @ = -");

const SocketQuery = z.object({
  agent_id: z.string().regex(AGENT_ID, "lower-case letters, digits, _ and - (at most 64)"),
  room_id: IdPart,
  user_id: IdPart,
});

const socketRoute = createRoute({
  method: "get",
  path: "/chat/socket",
  summary: "Open a WebSocket to a conversation: send messages, receive each run's events as they are written",
  description:
    "Upgrade with `Upgrade: websocket`. The token goes in `Authorization: Bearer <token>` or, from a browser, as the subprotocol " +
    "`bearer.<base64url(token)>` next to `sophie.v1` (the answer selects `sophie.v1`). Frames are JSON text: the client sends " +
    '`SocketMessageFrame` (`{type:"message", id, text}`; the id makes it idempotent), the server sends `SocketServerFrame`s: ' +
    "`accepted` (the run queued), `event` (each run event, as `GET /v1/runs/{run_id}/events` sends it), `response` (`/new`, " +
    "`/resume`) and `error` (the S3 error envelope with the frame's id; the socket stays open). The socket holds one of the " +
    "caller's open event streams (`limits.maxOpenStreamsPerCaller`) for as long as it is open. With an API key record each " +
    "message frame counts against the key's requests per minute and daily tokens, and the socket is closed (code 1008, after " +
    'an `error` frame) once the key is revoked, rotated or expired. docs/api.md "WebSocket conversations" has the whole contract.',
  middleware: [bearerFromSubprotocol, requireScope("api")] as const,
  request: {
    query: SocketQuery,
    headers: z.object({ upgrade: z.string().optional(), "sec-websocket-protocol": z.string().optional() }),
  },
  responses: {
    101: { description: "Switching Protocols: the socket is open" },
    400: {
      description: "Invalid ids, or subprotocols offered without `sophie.v1`",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
    401: { description: "Missing or invalid token", content: { "application/json": { schema: ErrorEnvelope } } },
    403: {
      description: "Not an api token, or a key that may not use this agent",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
    404: { description: "Unknown agent", content: { "application/json": { schema: ErrorEnvelope } } },
    426: { description: "Not a WebSocket upgrade", content: { "application/json": { schema: ErrorEnvelope } } },
    429: {
      description:
        "The caller already has `limits.maxOpenStreamsPerCaller` event streams open, or its API key's requests per minute are spent",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
  },
});

/** The WebSocket route (api scope), with its frame schemas in the OpenAPI components. */
export function socketRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openAPIRegistry.register("SocketMessageFrame", SocketMessageFrame);
  app.openAPIRegistry.register("SocketServerFrame", SocketServerFrame);
  app.openapi(socketRoute, async (c) => {
    const q = c.req.valid("query");
    if (!Object.hasOwn(c.get("config").agents, q.agent_id)) throw new GatewayError("resource.not_found", `unknown agent "${q.agent_id}"`);
    const principal = c.get("principal");
    if (principal?.scope !== "api") throw new GatewayError("auth.forbidden", "this route needs an API token");
    requireAgent(principal, q.agent_id); // issue 25 §1: a key record names the agents it may use
    const key = httpChatSessionKey(q.agent_id, principal.callerId, q.room_id, q.user_id);
    if (!key.ok) throw new GatewayError("invalid.request", key.error);
    if (c.req.header("Upgrade")?.toLowerCase() !== "websocket")
      throw new GatewayError("invalid.request", "this route opens a WebSocket: send Upgrade: websocket", {
        status: 426,
        headers: { Upgrade: "websocket" },
      });
    const protocol = selectedProtocol(c.req.header("Sec-WebSocket-Protocol"));
    await providerReady(c); // S1 §1.6: a strict gateway opens no conversation before its default model validates
    const lease = await openStreamLease(c); // 429 at the caller's cap, before any socket exists
    try {
      const grant: SocketGrant = {
        callerId: principal.callerId,
        agentId: q.agent_id,
        sessionKey: sessionObjectName(key.key),
        leaseId: lease.id,
        leaseObject: idempotencyObjectName(principal.callerId),
        // A key record's socket is the key's frame by frame (D-086): the object checks it and counts each message frame
        // against the key's limits as in force then, so only what names the key goes in the grant.
        ...(principal.key ? { key: { keyId: principal.key.keyId, secretTag: principal.key.secretTag } } : {}),
      };
      const res = await c.env.SESSIONS.getByName(sessionObjectName(key.key)).fetch("https://session.internal/socket", {
        headers: { Upgrade: "websocket", [SOCKET_GRANT_HEADER]: JSON.stringify(grant) },
      });
      if (res.status !== 101 || !res.webSocket)
        throw new GatewayError("internal.error", "the conversation did not accept the socket", { status: 503 });
      return new Response(null, {
        status: 101,
        webSocket: res.webSocket,
        headers: protocol ? { "Sec-WebSocket-Protocol": protocol } : {},
      }) as never;
    } catch (err) {
      await lease.release();
      throw err;
    }
  });
  return app;
}

/** The subprotocols a client offered, in order. */
function offered(header: string | undefined): string[] {
  return (header ?? "")
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
}

/** `sophie.v1` when the client offered subprotocols (it must be among them), none when it offered none. */
function selectedProtocol(header: string | undefined): string | null {
  const protocols = offered(header);
  if (protocols.length === 0) return null;
  if (!protocols.includes(SOCKET_PROTOCOL)) throw new GatewayError("invalid.request", `offer the subprotocol ${SOCKET_PROTOCOL}`);
  return SOCKET_PROTOCOL;
}

/**
 * A browser's token, offered as the subprotocol `bearer.<base64url(token)>`, moved to the Authorization header the
 * api guard reads (the request is otherwise unchanged); a header sent by the client wins.
 */
async function bearerFromSubprotocol(...[c, next]: Parameters<MiddlewareHandler<AppEnv>>): Promise<void> {
  const bearer = offered(c.req.header("Sec-WebSocket-Protocol")).find((p) => p.startsWith(BEARER_SUBPROTOCOL_PREFIX));
  if (bearer !== undefined && c.req.header("Authorization") === undefined) {
    const token = base64UrlText(bearer.slice(BEARER_SUBPROTOCOL_PREFIX.length));
    if (token === null)
      throw new GatewayError("auth.unauthorized", "malformed bearer subprotocol: expected bearer.<base64url of the token>", {
        headers: { "WWW-Authenticate": 'Bearer realm="sophie-gateway"' },
      });
    const headers = new Headers(c.req.raw.headers);
    headers.set("Authorization", `Bearer ${token}`);
    c.req.raw = new Request(c.req.raw, { headers });
  }
  await next();
}

/** The UTF-8 text of a base64url string, or null when it is not one. */
function base64UrlText(encoded: string): string | null {
  if (!/^[A-Za-z0-9_-]+$/.test(encoded)) return null;
  try {
    const bytes = Uint8Array.from(atob(encoded.replaceAll("-", "+").replaceAll("_", "/")), (ch) => ch.charCodeAt(0));
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    return null;
  }
}

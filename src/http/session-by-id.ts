/**
 * A session generation's Durable Object, found by its `session_id` through the D1 index of generations — the
 * one lookup every route addressed by `{session_id}` makes (admin session routes, tool callbacks).
 */

import { GatewayError } from "../errors";
import { findSessionKey } from "../sessions/index-d1";
import type { SessionDO } from "../sessions/SessionDO";

/** The session key, agent and stub of `sessionId`; 404 `no session <id>` when no generation has that id. */
export async function sessionById(
  env: { DB: D1Database; SESSIONS: DurableObjectNamespace<SessionDO> },
  sessionId: string,
): Promise<{ stub: DurableObjectStub<SessionDO>; sessionKey: string; agentId: string }> {
  const found = await findSessionKey(env.DB, sessionId);
  if (!found) throw new GatewayError("resource.not_found", `no session ${sessionId}`);
  return { stub: env.SESSIONS.getByName(found.sessionKey), ...found };
}

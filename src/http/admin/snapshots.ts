/**
 * Admin views of a session's snapshots (issue 21 item 3): what `save_snapshot` stored in AUDIT
 * (`agents/{agent}/snapshots/{id}.json`, src/tools/builtin/s5.ts), listed, read, and restored into the session
 * they were taken in. A session is named by any of its generations' `session_id`; snapshots belong to the
 * session key, so a snapshot of another session is not found there, and restoring it there is refused.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GatewayError } from "../../errors";
import { SESSION_ID } from "../../sessions/keys";
import { type SessionSnapshot, snapshotKey } from "../../tools/builtin/s5";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { sessionById } from "../session-by-id";
import { keyset, NextCursor, pageQuery } from "./paging";

const SNAPSHOT_ID = /^snap_[0-9a-f]{24}$/;

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const error = (description: string) => ({ description, content: json(ErrorEnvelope) });

const ChatMessage = z.object({ role: z.string(), content: z.string() });
const SnapshotCheckpoint = z
  .object({
    state: z.record(z.string(), z.unknown()),
    revision: z.number().int(),
    updated_ts: z.string().nullable(),
    recent_messages: z.array(ChatMessage).optional(),
    trace_tail: z.array(z.string()).optional(),
  })
  .openapi("SnapshotCheckpoint");
const Snapshot = z
  .object({
    snapshot_id: z.string(),
    session_key: z.string(),
    session_id: z.string(),
    run_id: z.string().nullable(),
    tool_call_id: z.string(),
    message: z.string().nullable(),
    created_at: z.string(),
    checkpoint: SnapshotCheckpoint,
  })
  .openapi("SessionSnapshot");
const SnapshotSummary = z
  .object({ snapshot_id: z.string(), session_id: z.string(), created_at: z.string() })
  .openapi("SessionSnapshotSummary");
type SnapshotSummary = z.infer<typeof SnapshotSummary>;
const Checkpoint = z
  .object({
    session_id: z.string(),
    revision: z.number().int(),
    updated_ts: z.number(),
    state: z.record(z.string(), z.unknown()),
    recent_messages: z.array(ChatMessage),
    trace_tail: z.array(z.string()),
  })
  .openapi("Checkpoint");

const sessionParam = z.object({ session_id: z.string().regex(SESSION_ID) });
const snapshotParams = sessionParam.extend({ snapshot_id: z.string().regex(SNAPSHOT_ID) });

/** One session key's snapshots page newest first on (created_at, snapshot_id); a cursor belongs to that key. */
const snapshotPages = (sessionKey: string) =>
  keyset<SnapshotSummary, [string, string]>(`snapshots:${sessionKey}`, ["string", "string"], (s) => [s.created_at, s.snapshot_id]);

const listRoute = createRoute({
  method: "get",
  path: "/chat/sessions/{session_id}/snapshots",
  summary: "The snapshots save_snapshot stored for a session, newest first",
  description:
    "The session is named by any of its generations' session_id; its snapshots of every generation are listed. Paged like every list " +
    "(docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `created_at` then `snapshot_id`, descending.",
  request: { params: sessionParam, query: z.object(pageQuery()) },
  responses: {
    200: {
      description: "Snapshots, newest first",
      content: json(z.object({ session_key: z.string(), snapshots: z.array(SnapshotSummary), next_cursor: NextCursor })),
    },
    400: error("Invalid id, query or cursor"),
    401: error("Missing or invalid token"),
    404: error("No such session"),
  },
});

const getRoute = createRoute({
  method: "get",
  path: "/chat/sessions/{session_id}/snapshots/{snapshot_id}",
  summary: "One snapshot of a session, as stored: its S4 checkpoint (state, revision, recent messages, trace tail)",
  request: { params: snapshotParams },
  responses: {
    200: { description: "The snapshot", content: json(Snapshot) },
    400: error("Invalid id"),
    401: error("Missing or invalid token"),
    404: error("No such session, or no such snapshot of this session"),
  },
});

const restoreRoute = createRoute({
  method: "post",
  path: "/chat/sessions/{session_id}/snapshots/{snapshot_id}/restore",
  summary: "Restore a snapshot into the session it was taken in",
  description:
    "Like `/new`, the current generation is archived (it stays resumable) and a new one starts whose transcript is the snapshot's recent " +
    "messages; the checkpoint's state and trace tail become the snapshot's, at the next revision. A snapshot of another session is refused " +
    "(409); so is a restore while a run of the session is queued, running or awaiting approval (409). Audited (`snapshot.restored`).",
  request: { params: snapshotParams },
  responses: {
    200: {
      description: "Restored: the new generation and the session's checkpoint now",
      content: json(
        z.object({
          session_key: z.string(),
          snapshot_id: z.string(),
          session_id: z.string(),
          previous_session_id: z.string(),
          checkpoint: Checkpoint,
        }),
      ),
    },
    400: error("Invalid id"),
    401: error("Missing or invalid token"),
    404: error("No such session or snapshot"),
    409: error("The snapshot belongs to another session, or a run of the session is in progress"),
    503: error("The current generation could not be archived; nothing changed"),
  },
});

/** A stored snapshot of the agent, whichever session it belongs to, or null. */
async function readSnapshot(bucket: R2Bucket, agentId: string, snapshotId: string): Promise<SessionSnapshot | null> {
  const object = await bucket.get(snapshotKey(agentId, snapshotId));
  return object ? (JSON.parse(await object.text()) as SessionSnapshot) : null;
}

/**
 * The summaries of one session key's snapshots: the agent's snapshot objects listed with their metadata
 * (written by save_snapshot); an object stored without it is read to learn its session.
 */
async function listSnapshots(bucket: R2Bucket, agentId: string, sessionKey: string): Promise<SnapshotSummary[]> {
  const prefix = snapshotKey(agentId, "").replace(/\.json$/, "");
  const found: SnapshotSummary[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ prefix, include: ["customMetadata"], ...(cursor ? { cursor } : {}) });
    for (const o of page.objects) {
      const id = o.key.slice(prefix.length).replace(/\.json$/, "");
      let meta = o.customMetadata ?? {};
      if (!meta.session_key) {
        const s = await readSnapshot(bucket, agentId, id);
        meta = s ? { session_key: s.session_key, session_id: s.session_id, created_at: s.created_at } : {};
      }
      if (meta.session_key === sessionKey)
        found.push({ snapshot_id: id, session_id: meta.session_id ?? "", created_at: meta.created_at ?? o.uploaded.toISOString() });
    }
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return found.sort((a, b) =>
    a.created_at === b.created_at ? b.snapshot_id.localeCompare(a.snapshot_id) : b.created_at.localeCompare(a.created_at),
  );
}

/** Admin snapshot routes. */
export function adminSnapshotRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(listRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    const q = c.req.valid("query");
    const { sessionKey, agentId } = await sessionById(c.env, session_id);
    const { items, next_cursor } = await snapshotPages(sessionKey).serve(q, async (after, limit) => {
      const all = await listSnapshots(c.env.AUDIT, agentId, sessionKey);
      const rest = after ? all.filter((s) => s.created_at < after[0] || (s.created_at === after[0] && s.snapshot_id < after[1])) : all;
      return rest.slice(0, limit);
    });
    return c.json({ session_key: sessionKey, snapshots: items, next_cursor }, 200);
  });
  app.openapi(getRoute, async (c) => {
    const { session_id, snapshot_id } = c.req.valid("param");
    const { sessionKey, agentId } = await sessionById(c.env, session_id);
    const snapshot = await readSnapshot(c.env.AUDIT, agentId, snapshot_id);
    if (!snapshot || snapshot.session_key !== sessionKey)
      throw new GatewayError("resource.not_found", `no snapshot ${snapshot_id} of session ${session_id}`);
    return c.json(snapshot as never, 200);
  });
  app.openapi(restoreRoute, async (c) => {
    const { session_id, snapshot_id } = c.req.valid("param");
    const { sessionKey, agentId } = await sessionById(c.env, session_id);
    const snapshot = await readSnapshot(c.env.AUDIT, agentId, snapshot_id);
    if (!snapshot) throw new GatewayError("resource.not_found", `no snapshot ${snapshot_id}`);
    if (snapshot.session_key !== sessionKey)
      throw new GatewayError(
        "conflict",
        `snapshot ${snapshot_id} was taken in another session (${snapshot.session_key}); a snapshot can be restored only into its own session`,
      );
    const cp = snapshot.checkpoint;
    const result = await c.env.SESSIONS.getByName(sessionKey).restoreSnapshot(
      { sessionKey, agentId },
      { snapshot_id, state: cp.state, recent_messages: cp.recent_messages ?? [], trace_tail: cp.trace_tail ?? [] },
    );
    if (!result.ok && result.reason === "busy")
      throw new GatewayError("conflict", `a run of session ${sessionKey} is in progress; restore the snapshot when it has ended`);
    if (!result.ok)
      throw new GatewayError("internal.error", "the current generation could not be archived; nothing changed", { status: 503 });
    const body = {
      session_key: sessionKey,
      snapshot_id,
      session_id: result.checkpoint.session_id,
      previous_session_id: result.previousSessionId,
    };
    return c.json({ ...body, checkpoint: result.checkpoint } as never, 200);
  });
  return app;
}

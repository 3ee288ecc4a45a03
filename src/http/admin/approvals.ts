/**
 * Human approvals and capabilities for admins (S1 §3.3, S4 §1.1, DESIGN "Approvals", "Capabilities"):
 *   GET  /api/admin/approvals                         the D1 approval index, newest first, paged (src/http/admin/paging.ts)
 *   GET  /api/admin/approvals/{approval_id}           one approval with its redacted arguments
 *   POST /api/admin/approvals/{approval_id}           {decision: "approve"|"deny", reason?} → 200; 409 decided, 410 expired
 * Each approval says who decided it and through what (`decided_by`, `decided_via`: the admin, or a chat's button — issue 24 §2).
 *   GET  /api/admin/sessions/{session_id}/capabilities   granted and pending (requested by the model) capabilities
 *   POST /api/admin/sessions/{session_id}/capabilities   {grant: cap} or {revoke: cap}
 * An approval id names the SessionDO that holds it, so deciding never scans.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { GatewayError } from "../../errors";
import { APPROVAL_ID, type ApprovalIndexRow, type ApprovalRow, approvalObjectId, decidedVia, listApprovals } from "../../runs/approvals";
import { forgetBacklog } from "../../runs/backlog";
import { findSessionKey } from "../../sessions/index-d1";
import { SESSION_ID } from "../../sessions/keys";
import type { SessionDO } from "../../sessions/SessionDO";
import { requireJsonBody } from "../middleware/json-body";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { invalidListQuery, keyset, NextCursor, pageQuery } from "./paging";

const DecidedViaSchema = z.enum(["admin", "telegram", "slack"]).nullable().openapi({
  description: "Through what it was decided: the admin API or dashboard (`admin`), or a chat's button; null while pending or expired",
});

const Approval = z
  .object({
    approval_id: z.string(),
    run_id: z.string(),
    tool: z.string(),
    tool_call_id: z.string(),
    args: z.unknown(),
    args_sha256: z.string(),
    requester: z.string(),
    channel: z.string(),
    reason: z.string(),
    status: z.enum(["pending", "approved", "denied", "expired"]),
    created_at: z.string(),
    expires_at: z.string(),
    decided_at: z.string().nullable(),
    decided_by: z.string().nullable().openapi({
      description:
        "Who decided: `admin`, or `telegram:<user id>` / `slack:<user id>` for a chat button (issue 24 §2); null while pending or expired",
    }),
    decided_via: DecidedViaSchema,
    decision_reason: z.string().nullable(),
  })
  .openapi("Approval");

const ApprovalSummary = z
  .object({
    approval_id: z.string(),
    agent_id: z.string(),
    run_id: z.string(),
    session_key: z.string(),
    tool: z.string(),
    status: z.string(),
    created_at: z.string(),
    expires_at: z.string(),
    decided_at: z.string().nullable(),
    decided_by: z.string().nullable().openapi({
      description: "`admin`, `telegram:<user id>` or `slack:<user id>`; null while pending, expired, or indexed before issue 24 §2",
    }),
    decided_via: DecidedViaSchema,
  })
  .openapi("ApprovalSummary");

export const DecisionRequest = z
  .strictObject({ decision: z.enum(["approve", "deny"]), reason: z.string().min(1).max(500).optional() })
  .openapi("ApprovalDecision");

const ApprovalParam = z.object({ approval_id: z.string().regex(APPROVAL_ID, "an approval id (apr_…)") });
const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const unauthorized = { description: "Missing or invalid token", content: json(ErrorEnvelope) };
const notFound = { description: "No such approval or session", content: json(ErrorEnvelope) };

/** Approvals page newest first on (created_at, approval_id), which never change for an approval. */
const approvalPages = keyset<ApprovalIndexRow, [string, string]>("approvals", ["string", "string"], (a) => [a.created_at, a.approval_id]);

const listRoute = createRoute({
  method: "get",
  path: "/approvals",
  summary: "List approval requests, newest first",
  description:
    "Paged like every list (docs/api.md, Lists): `limit`, `cursor` → `next_cursor`. Order: `created_at` then `approval_id`, descending.",
  request: {
    query: z.object({
      status: z.enum(["pending", "approved", "denied", "expired"]).optional().openapi({ description: "Only approvals in this status" }),
      agent_id: z.string().optional().openapi({ description: "Only this agent's approvals" }),
      ...pageQuery(),
    }),
  },
  responses: {
    200: {
      description: "Approvals, newest first",
      content: json(z.object({ approvals: z.array(ApprovalSummary), next_cursor: NextCursor })),
    },
    400: invalidListQuery,
    401: unauthorized,
  },
});

const getRoute = createRoute({
  method: "get",
  path: "/approvals/{approval_id}",
  summary: "One approval request, with the redacted arguments it was asked for",
  request: { params: ApprovalParam },
  responses: { 200: { description: "The approval", content: json(Approval) }, 401: unauthorized, 404: notFound },
});

const decideRoute = createRoute({
  method: "post",
  path: "/approvals/{approval_id}",
  summary: "Approve or deny a pending tool call; the run resumes",
  middleware: [requireJsonBody] as const,
  request: { params: ApprovalParam, body: { required: true, content: { "application/json": { schema: DecisionRequest } } } },
  responses: {
    200: { description: "Decided", content: json(Approval) },
    401: unauthorized,
    404: notFound,
    409: { description: "Already decided", content: json(ErrorEnvelope) },
    410: { description: "Expired before the decision", content: json(ErrorEnvelope) },
  },
});

const Capabilities = z
  .object({ session_id: z.string(), granted: z.array(z.string()), pending: z.array(z.string()) })
  .openapi("SessionCapabilities");

const capsRoute = createRoute({
  method: "get",
  path: "/sessions/{session_id}/capabilities",
  summary: "Capabilities granted to a session, and those the model requested (pending)",
  request: { params: z.object({ session_id: z.string().regex(SESSION_ID) }) },
  responses: { 200: { description: "Capabilities", content: json(Capabilities) }, 401: unauthorized, 404: notFound },
});

/** `net`, `net:<domain>` and other `word[:value]` capabilities (S4 §1.1). */
const CAPABILITY = /^[a-z][a-z0-9_]*(:[A-Za-z0-9._-]{1,253})?$/;

const CapabilityChange = z
  .union([
    z.strictObject({ grant: z.string().regex(CAPABILITY, "a capability such as net or net:example.com") }),
    z.strictObject({ revoke: z.string().regex(CAPABILITY, "a capability such as net or net:example.com") }),
  ])
  .openapi("CapabilityChange");

const changeCapsRoute = createRoute({
  method: "post",
  path: "/sessions/{session_id}/capabilities",
  summary: "Grant or revoke one capability (admins only: a model can only request)",
  middleware: [requireJsonBody] as const,
  request: {
    params: z.object({ session_id: z.string().regex(SESSION_ID) }),
    body: {
      required: true,
      content: { "application/json": { schema: CapabilityChange } },
    },
  },
  responses: { 200: { description: "Capabilities after the change", content: json(Capabilities) }, 401: unauthorized, 404: notFound },
});

function approvalStub(c: Context<AppEnv>, id: string): DurableObjectStub<SessionDO> {
  const objectId = approvalObjectId(id);
  if (!objectId) throw new GatewayError("resource.not_found", `no approval ${id}`);
  try {
    return c.env.SESSIONS.get(c.env.SESSIONS.idFromString(objectId));
  } catch {
    throw new GatewayError("resource.not_found", `no approval ${id}`);
  }
}

function view(a: ApprovalRow): z.infer<typeof Approval> {
  let args: unknown = a.args;
  try {
    args = JSON.parse(a.args);
  } catch {
    /* the raw text */
  }
  return {
    approval_id: a.id,
    run_id: a.run_id,
    tool: a.tool,
    tool_call_id: a.tool_call_id,
    args,
    args_sha256: a.args_sha256,
    requester: a.requester,
    channel: a.channel,
    reason: a.reason,
    status: a.status,
    created_at: a.created_at,
    expires_at: a.expires_at,
    decided_at: a.decided_at,
    decided_by: a.decided_by,
    decided_via: decidedVia(a.decided_by),
    decision_reason: a.decision_reason,
  };
}

async function sessionFor(c: Context<AppEnv>, sessionId: string) {
  const owner = await findSessionKey(c.env.DB, sessionId);
  if (!owner) throw new GatewayError("resource.not_found", `no session ${sessionId}`);
  return { identity: { sessionKey: owner.sessionKey, agentId: owner.agentId }, stub: c.env.SESSIONS.getByName(owner.sessionKey) };
}

/** Admin approval and capability routes. */
export function adminApprovalRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(listRoute, async (c) => {
    const q = c.req.valid("query");
    const { items, next_cursor } = await approvalPages.serve(q, (after, limit) =>
      listApprovals(c.env.DB, { status: q.status, agentId: q.agent_id, after, limit }),
    );
    const approvals = items.map((a) => ({ ...a, decided_by: a.decided_by ?? null, decided_via: a.decided_via ?? null }));
    return c.json({ approvals, next_cursor }, 200);
  });

  app.openapi(getRoute, async (c) => {
    const { approval_id } = c.req.valid("param");
    const approval = (await approvalStub(c, approval_id).approval(approval_id)) as ApprovalRow | null;
    if (!approval) throw new GatewayError("resource.not_found", `no approval ${approval_id}`);
    return c.json(view(approval), 200);
  });

  app.openapi(decideRoute, async (c) => {
    const { approval_id } = c.req.valid("param");
    const body = c.req.valid("json");
    const result = (await approvalStub(c, approval_id).decideApproval(approval_id, body.decision, "admin", body.reason ?? null)) as
      | { ok: true; approval: ApprovalRow }
      | { ok: false; reason: "not_found" | "decided" | "expired"; approval?: ApprovalRow };
    forgetBacklog(); // this isolate's early backlog check sees the decision at once (src/runs/backlog.ts)
    if (result.ok) return c.json(view(result.approval), 200);
    if (result.reason === "not_found") throw new GatewayError("resource.not_found", `no approval ${approval_id}`);
    if (result.reason === "expired")
      throw new GatewayError("gone", `approval ${approval_id} expired at ${result.approval?.expires_at}; the call was denied`);
    throw new GatewayError("conflict", `approval ${approval_id} was already decided (${result.approval?.status})`);
  });

  app.openapi(capsRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    const { identity, stub } = await sessionFor(c, session_id);
    const { state } = await stub.checkpoint(identity);
    return c.json({ session_id, granted: state.capabilities_granted, pending: state.capabilities_pending }, 200);
  });

  app.openapi(changeCapsRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    const body = c.req.valid("json");
    const { identity, stub } = await sessionFor(c, session_id);
    const { state } =
      "grant" in body ? await stub.grantCapability(identity, body.grant) : await stub.revokeCapability(identity, body.revoke);
    return c.json({ session_id, granted: state.capabilities_granted, pending: state.capabilities_pending }, 200);
  });

  return app;
}

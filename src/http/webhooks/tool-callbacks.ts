/**
 * Gateway tool callbacks (S5 §Gateway Callback Contract, §6.3; DESIGN §3 "Auth"), called by a session's sandbox:
 *   POST /v1/sessions/{session_id}/tools/{tool_name}       {tool_call_id, args} → {success, result, data?}
 *   POST /proliferate/{session_id}/tools/{tool_name}       the same, at S5's path
 * (the admin mints and revokes the sandbox tokens: src/http/admin/sandbox-tokens.ts).
 *
 * A webhook in all but name: the caller is a machine outside the API relationship that calls back into a session
 * with a credential minted for that one session, so these sit with the channel webhooks, not with /v1, although
 * one of S5's paths starts with /v1 (docs/decisions.md D-048). Only a valid sandbox token for that very session
 * is accepted (src/http/middleware/sandbox-token.ts). The call runs in the session's Durable Object, once per
 * `(tool, tool_call_id)`, durably (see SessionDO.toolCallback). Tool-level failures are `200 {success:false,
 * result}` with an actionable message; HTTP errors are for the transport: a bad body (400), an unknown or
 * archived session (404, 410), a key reused with other arguments (422).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { GatewayError } from "../../errors";
import { buildRunSpec } from "../../runs/spec";
import { SESSION_ID } from "../../sessions/keys";
import type { ToolCallbackAnswer } from "../../sessions/SessionDO";
import { MAX_JSON_DEPTH, requireJsonBody, withinJsonDepth } from "../middleware/json-body";
import { requireSandbox } from "../middleware/sandbox-token";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { sessionById } from "../session-by-id";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const SessionParam = z.object({ session_id: z.string().regex(SESSION_ID, "a session id (ses_…)") });

/** S5 callback body: the call's idempotency key and the tool's arguments. */
export const CallbackRequest = z
  .strictObject({
    tool_call_id: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[A-Za-z0-9_.:-]+$/, "letters, digits and _ . : - (at most 200)"),
    args: z
      .record(z.string(), z.unknown())
      .refine((args) => withinJsonDepth(args), `nested deeper than ${MAX_JSON_DEPTH} levels`)
      .default({}),
  })
  .openapi("ToolCallbackRequest");

const CallbackResult = z.object({ success: z.boolean(), result: z.string(), data: z.unknown().optional() }).openapi("ToolCallbackResult");

const forbidden = { description: "Not this session's sandbox token", content: json(ErrorEnvelope) };

function callbackRoute(path: string, summary: string) {
  return createRoute({
    method: "post",
    path,
    summary,
    middleware: [requireSandbox(), requireJsonBody] as const,
    request: {
      params: SessionParam.extend({ tool_name: z.string().min(1).max(100) }),
      body: { required: true, content: json(CallbackRequest) },
    },
    responses: {
      200: { description: "The tool's answer (also for tool-level failures: success false)", content: json(CallbackResult) },
      400: { description: "Malformed body", content: json(ErrorEnvelope) },
      403: forbidden,
      404: { description: "No such session", content: json(ErrorEnvelope) },
      410: { description: "The session was archived (/new)", content: json(ErrorEnvelope) },
      422: { description: "tool_call_id reused with different arguments", content: json(ErrorEnvelope) },
    },
  });
}

/** The sandbox tool-callback routes. */
export function toolCallbackRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  const handler = async (c: Parameters<Parameters<typeof app.openapi>[1]>[0]) => {
    const { session_id, tool_name } = c.req.param() as { session_id: string; tool_name: string };
    const body = CallbackRequest.parse(await c.req.json());
    const config = c.get("config");
    const { stub, agentId } = await sessionById(c.env, session_id);
    // The same policy a run of this agent gets; an agent no longer configured may run nothing.
    const spec = Object.hasOwn(config.agents, agentId) ? buildRunSpec(config, agentId, "sandbox") : null;
    const answer = (await stub.toolCallback(session_id, tool_name, body.tool_call_id, body.args, {
      allow: spec?.tools ?? [],
      policy: spec?.policy ?? { id: config.tools.policy.id, risks: [], approvalRequired: [], channels: {} },
      retentionMs: config.tools.callbacks.retentionSeconds * 1000,
      timeoutMs: config.runs.toolTimeoutMs.max,
    })) as ToolCallbackAnswer;
    if (answer.status !== 200) throw new GatewayError(answer.code, answer.message);
    c.get("logger").log("info", "tool.callback", {
      session_id,
      tool: tool_name,
      tool_call_id: body.tool_call_id,
      success: answer.body.success,
      replayed: answer.replayed,
    });
    if (answer.replayed) c.header("Idempotent-Replayed", "true");
    return c.json(answer.body, 200);
  };
  app.openapi(
    callbackRoute("/v1/sessions/{session_id}/tools/{tool_name}", "Run a gateway-mediated tool for a sandbox (S5)"),
    handler as never,
  );
  app.openapi(callbackRoute("/proliferate/{session_id}/tools/{tool_name}", "The same callback at S5's path"), handler as never);
  return app;
}

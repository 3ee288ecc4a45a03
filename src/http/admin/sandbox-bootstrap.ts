/**
 * The sandbox bootstrap (S5 "Capability Injection", §6.4, §6.5; issue 21 §6):
 *   POST /api/admin/sessions/{session_id}/sandbox-bootstrap   {ttl_seconds?} → everything a sandbox needs for
 *   that session's gateway-mediated tools, with a freshly minted (recorded, revocable) sandbox token.
 * Tool files cover S5's contract tools the agent allowlists; setup-only ones only in setup sessions (S5 §6.2).
 * The parts of S5's injection this gateway does not provide are listed in docs/decisions.md (D-042).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { resolveAgentModel } from "../../config/model-ref";
import { GatewayError } from "../../errors";
import {
  OPENCODE_CONFIG_PATHS,
  OPENCODE_START,
  opencodeConfig,
  S5_TOOLS,
  SANDBOX_ENV,
  toOpencodeModelId,
  toolFiles,
} from "../../sandbox/bootstrap";
import { CALLBACK_CLIENT } from "../../sandbox/callback-client";
import { sessionEnvValues } from "../../sandbox/env-requests";
import { secretsKey } from "../../security/secrets-store";
import { SESSION_ID } from "../../sessions/keys";
import { isAllowlisted } from "../../tools/policy";
import { type ToolDefinition, tools } from "../../tools/registry";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { sessionById } from "../session-by-id";
import { mintRecordedSandboxToken } from "./sandbox-tokens";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });

const Bootstrap = z
  .object({
    session_id: z.string(),
    session_type: z.enum(["ordinary", "setup"]),
    token_id: z.string().openapi({ description: "Revoke with POST /api/admin/sandbox-tokens/{token_id}/revoke" }),
    expires_at: z.string(),
    env: z
      .object({ PROLIFERATE_GATEWAY_URL: z.string(), PROLIFERATE_SESSION_ID: z.string(), SANDBOX_MCP_AUTH_TOKEN: z.string() })
      .catchall(z.string())
      .openapi({
        description:
          "S5 §6.4: set in the sandbox runtime before OpenCode starts. Also the values submitted for the session's environment requests " +
          "(POST /api/admin/env-requests/{request_id}/values; the agent's persisted ones, then the session's own), which never override the three above",
      }),
    tools: z.array(z.string()).openapi({ description: "The tools the files below provide" }),
    files: z
      .array(z.object({ path: z.string(), content: z.string() }))
      .openapi({ description: "Repo-relative: `.opencode/tool/<name>.ts` + `.txt` per tool" }),
    opencode_config: z.record(z.string(), z.unknown()),
    opencode_config_paths: z.array(z.string()).openapi({ description: "Write the config to each (global, then repo-local)" }),
    opencode_start: z.array(z.string()),
    model: z.object({ ref: z.string(), opencode_model_id: z.string(), api_model_id: z.string() }),
    callback_client: z.string().openapi({ description: "The retrying callback client each tool file embeds (JavaScript)" }),
  })
  .openapi("SandboxBootstrap");

const route = createRoute({
  method: "post",
  path: "/sessions/{session_id}/sandbox-bootstrap",
  summary: "Everything a sandbox needs for this session's S5 tools, with a new sandbox token",
  description:
    "Mints a sandbox token (recorded in D1, revocable, audited as `sandbox_token.minted`) and returns the environment " +
    "(`PROLIFERATE_GATEWAY_URL`, `PROLIFERATE_SESSION_ID`, `SANDBOX_MCP_AUTH_TOKEN`), the `.opencode/tool/` files of S5's contract tools " +
    "the agent allowlists (setup-only tools only in setup sessions), the OpenCode config and the model id mapping. The token is shown once.",
  request: {
    params: z.object({ session_id: z.string().regex(SESSION_ID, "a session id (ses_…)") }),
    body: { required: false, content: json(z.strictObject({ ttl_seconds: z.int().min(60).max(604_800).optional() })) },
  },
  responses: {
    201: { description: "The bundle", content: json(Bootstrap) },
    400: { description: "Invalid body", content: json(ErrorEnvelope) },
    401: { description: "Missing or invalid token", content: json(ErrorEnvelope) },
    403: { description: "Not the admin token", content: json(ErrorEnvelope) },
    404: { description: "No such session, or its agent is no longer configured", content: json(ErrorEnvelope) },
    410: { description: "That generation was archived (/new)", content: json(ErrorEnvelope) },
    503: { description: "SANDBOX_TOKEN_SECRET is not set", content: json(ErrorEnvelope) },
  },
});

/** S5's contract tools the agent allowlists, setup-only ones only in a setup session. */
function bootstrapTools(allow: readonly string[], setup: boolean): ToolDefinition[] {
  return S5_TOOLS.map((name) => tools.get(name)).filter(
    (def): def is ToolDefinition => def !== undefined && (!def.setupOnly || setup) && isAllowlisted(def, allow, tools),
  );
}

/** The values submitted for the session's env requests (issue 21 §2); none without SECRETS_ENCRYPTION_KEY. */
async function requestedEnv(env: AppEnv["Bindings"], agentId: string, sessionId: string): Promise<Record<string, string>> {
  const key = await secretsKey(env.SECRETS_ENCRYPTION_KEY);
  return key ? sessionEnvValues(env.DB, key, agentId, sessionId) : {};
}

/** The sandbox bootstrap route. */
export function adminSandboxBootstrapRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(route, async (c) => {
    const { session_id } = c.req.valid("param");
    const config = c.get("config");
    const { stub, ...owner } = await sessionById(c.env, session_id);
    const agent = Object.hasOwn(config.agents, owner.agentId) ? config.agents[owner.agentId] : undefined;
    if (!agent) throw new GatewayError("resource.not_found", `agent "${owner.agentId}" of session ${session_id} is not configured`);
    const info = await stub.sessionInfo(owner);
    if (info.sessionId !== session_id)
      throw new GatewayError("gone", `session ${session_id} was archived; bootstrap the current generation`);
    const body = (await c.req.json().catch(() => ({}))) as { ttl_seconds?: number };
    const minted = await mintRecordedSandboxToken(c.env, session_id, body.ttl_seconds ?? config.tools.callbacks.sandboxTokenTtlSeconds);
    const defs = bootstrapTools(agent.tools.allow, info.sessionType === "setup");
    const model = resolveAgentModel(config, owner.agentId);
    return c.json(
      {
        session_id,
        session_type: info.sessionType,
        token_id: minted.token_id,
        expires_at: minted.expires_at,
        env: {
          ...(await requestedEnv(c.env, owner.agentId, session_id)),
          [SANDBOX_ENV.gatewayUrl]: new URL(c.req.url).origin,
          [SANDBOX_ENV.sessionId]: session_id,
          [SANDBOX_ENV.token]: minted.token,
        } as { PROLIFERATE_GATEWAY_URL: string; PROLIFERATE_SESSION_ID: string; SANDBOX_MCP_AUTH_TOKEN: string },
        tools: defs.map((d) => d.name),
        files: toolFiles(defs),
        opencode_config: opencodeConfig(model),
        opencode_config_paths: [...OPENCODE_CONFIG_PATHS],
        opencode_start: [...OPENCODE_START],
        model: { ref: model.ref, opencode_model_id: toOpencodeModelId(model), api_model_id: model.apiModelId },
        callback_client: CALLBACK_CLIENT,
      },
      201,
    );
  });
  return app;
}

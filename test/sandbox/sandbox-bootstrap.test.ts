/**
 * Issue 21 §6: the sandbox bootstrap. One admin endpoint returns what S5 says a sandbox receives — tool files
 * (setup-only tools only in setup sessions), the OpenCode config, the model id mapping (`toOpencodeModelId`),
 * the environment (`PROLIFERATE_GATEWAY_URL`, `PROLIFERATE_SESSION_ID`, `SANDBOX_MCP_AUTH_TOKEN`) and a callback
 * client that retries with the same tool_call_id — and the token in it opens that session's callbacks only.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../src/config/parse";
import type { GatewayConfig } from "../../src/config/schema";
import { mockProvider, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, call, readResponse, until, waitForRun } from "../support/runs";

const S5_ALLOW = ["verify", "save_snapshot", "automation.complete", "save_service_commands", "save_env_files", "request_env_variables"];
const ORDINARY_TOOLS = ["verify", "save_snapshot", "automation.complete", "request_env_variables"];
const SETUP_TOOLS = ["verify", "save_snapshot", "automation.complete", "save_service_commands", "save_env_files", "request_env_variables"];
const filesOf = (names: string[]) =>
  names.flatMap((n) => [`.opencode/tool/${n.replace(".", "_")}.ts`, `.opencode/tool/${n.replace(".", "_")}.txt`]);

async function chatSession(app: App, agentId: string, room = `r-${crypto.randomUUID().slice(0, 8)}`): Promise<string> {
  const res = await call(app, "POST", "/v1/chat/messages", {
    user_id: "u",
    room_id: room,
    agent_id: agentId,
    message: "hi",
  });
  expect(res.status).toBe(202);
  await waitForRun(app, res.body.id);
  return res.body.session_id;
}

async function callback(sessionId: string, tool: string, token: string, toolCallId: string, args: Record<string, unknown> = {}, app?: App) {
  const res = await (app as App).request(
    `https://gateway.test/v1/sessions/${sessionId}/tools/${tool}`,
    {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ tool_call_id: toolCallId, args }),
    },
    env,
  );
  return readResponse(res);
}

describe("ISSUE21-6 the sandbox bootstrap", () => {
  it("ISSUE21-6 an ordinary session's bundle: S5 tools without the setup-only ones, exact env names, OpenCode config, litellm model id", async () => {
    const host = uniqueHost("script");
    const agentId = `sbx-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ content: "ok" }]);
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: S5_ALLOW } } }));
    const sessionId = await chatSession(app, agentId);
    const res = await call(app, "POST", `/api/admin/sessions/${sessionId}/sandbox-bootstrap`, {}, ADMIN);
    expect(res.status).toBe(201);
    const b = res.body;
    expect(Object.keys(b)).toEqual([
      "session_id",
      "session_type",
      "token_id",
      "expires_at",
      "env",
      "tools",
      "files",
      "opencode_config",
      "opencode_config_paths",
      "opencode_start",
      "model",
      "callback_client",
    ]);
    expect(b.session_id).toBe(sessionId);
    expect(b.session_type).toBe("ordinary");
    expect(b.token_id).toMatch(/^sbt_[0-9a-f]{24}$/);
    expect(Object.keys(b.env)).toEqual(["PROLIFERATE_GATEWAY_URL", "PROLIFERATE_SESSION_ID", "SANDBOX_MCP_AUTH_TOKEN"]);
    expect(b.env.PROLIFERATE_GATEWAY_URL).toBe("https://gateway.test");
    expect(b.env.PROLIFERATE_SESSION_ID).toBe(sessionId);
    expect(b.env.SANDBOX_MCP_AUTH_TOKEN).toMatch(/^sbx1\./);
    expect(b.tools).toEqual(ORDINARY_TOOLS);
    expect(b.files.map((f: { path: string }) => f.path)).toEqual(filesOf(ORDINARY_TOOLS));
    expect(b.files.map((f: { path: string }) => f.path).join(" ")).not.toMatch(/save_service_commands|save_env_files/);
    expect(b.opencode_config).toEqual({
      $schema: "https://opencode.ai/config.json",
      model: "litellm/kimi-k1-128k",
      provider: {
        anthropic: { options: {}, models: {} },
        litellm: { npm: "@ai-sdk/openai-compatible", name: "LiteLLM", options: {}, models: { "kimi-k1-128k": { name: "kimi-k1-128k" } } },
      },
      permission: { "*": "allow", question: "deny" },
      mcp: {},
    });
    expect(b.opencode_config_paths).toEqual(["/home/user/.config/opencode/opencode.json", "opencode.json"]);
    expect(b.opencode_start).toEqual(["opencode", "serve", "--hostname", "0.0.0.0", "--port", "4096"]);
    expect(b.model).toEqual({ ref: "moonshot:kimi-k1-128k", opencode_model_id: "litellm/kimi-k1-128k", api_model_id: "kimi-k1-128k" });

    // The callback client: S5's path and env names, 5 retries, 120 s per attempt, one tool_call_id for all attempts.
    const client: string = b.callback_client;
    expect(client).toContain('base + "/proliferate/" + encodeURIComponent(session) + "/tools/" + encodeURIComponent(tool)');
    expect(client).toContain("process.env.PROLIFERATE_GATEWAY_URL");
    expect(client).toContain("process.env.PROLIFERATE_SESSION_ID");
    expect(client).toContain("process.env.SANDBOX_MCP_AUTH_TOKEN");
    expect(client).toContain("const MAX_RETRIES = 5;");
    expect(client).toContain("const ATTEMPT_TIMEOUT_MS = 120_000;");
    expect(client).toContain("const body = JSON.stringify({ tool_call_id: toolCallId, args });");
    const verifyTs = b.files.find((f: { path: string }) => f.path === ".opencode/tool/verify.ts").content as string;
    expect(verifyTs).toContain(client);
    expect(verifyTs).toContain('import { tool } from "@opencode-ai/plugin";');
    expect(verifyTs).toContain('args: { "folder": tool.schema.string()');
    expect(verifyTs).toContain('callGateway("verify", toolCallId, args)');
    const completeTs = b.files.find((f: { path: string }) => f.path === ".opencode/tool/automation_complete.ts").content as string;
    expect(completeTs).toContain("const toolCallId = String(args.completion_id);");
    expect(completeTs).toContain('callGateway("automation.complete", toolCallId, args)');
  });

  it("ISSUE21-6 a setup session's bundle adds save_service_commands and save_env_files", async () => {
    const host = uniqueHost("script");
    const agentId = `sbs-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ content: "set up" }]);
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: S5_ALLOW } } }));
    const started = await call(app, "POST", "/api/admin/setup-sessions", { agent_id: agentId, message: "set up" }, ADMIN);
    expect(started.status).toBe(202);
    let sessionId = "";
    await until(async () => {
      const runs = await call(app, "GET", `/api/admin/runs?agent_id=${agentId}`, undefined, ADMIN);
      sessionId = runs.body.runs[0]?.session_id ?? "";
      return sessionId !== "";
    });
    const res = await call(app, "POST", `/api/admin/sessions/${sessionId}/sandbox-bootstrap`, { ttl_seconds: 600 }, ADMIN);
    expect(res.status).toBe(201);
    expect(res.body.session_type).toBe("setup");
    expect(res.body.tools).toEqual(SETUP_TOOLS);
    expect(res.body.files.map((f: { path: string }) => f.path)).toEqual(filesOf(SETUP_TOOLS));
    expect(Date.parse(res.body.expires_at) - Date.now()).toBeGreaterThan(590_000);
    expect(Date.parse(res.body.expires_at) - Date.now()).toBeLessThanOrEqual(600_000);
  });

  it("ISSUE21-6 the bundle's token works on its session's callback route and nowhere else, and is revocable by its token_id", async () => {
    const host = uniqueHost("script");
    const agentId = `sbt-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ content: "ok" }, { content: "ok" }]);
    const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: S5_ALLOW } } }));
    const sessionId = await chatSession(app, agentId);
    const other = await chatSession(app, agentId);
    const b = (await call(app, "POST", `/api/admin/sessions/${sessionId}/sandbox-bootstrap`, {}, ADMIN)).body;
    const token = b.env.SANDBOX_MCP_AUTH_TOKEN as string;

    const ok = await callback(sessionId, "save_snapshot", token, "snap-1", { message: "first" }, app);
    expect(ok.status).toBe(200);
    expect(ok.body.success).toBe(true);
    // A retry with the same tool_call_id is replayed, not run again.
    const again = await callback(sessionId, "save_snapshot", token, "snap-1", { message: "first" }, app);
    expect(again.body).toEqual(ok.body);
    expect(again.headers.get("Idempotent-Replayed")).toBe("true");

    const elsewhere = await callback(other, "save_snapshot", token, "snap-2", {}, app);
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.body.error.code).toBe("auth.forbidden");
    expect((await call(app, "GET", `/api/admin/sessions/${sessionId}/system-prompt`, undefined, token)).status).toBe(401);
    expect(
      (await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: "r", agent_id: agentId, message: "x" }, token)).status,
    ).toBe(401);

    expect((await call(app, "POST", `/api/admin/sandbox-tokens/${b.token_id}/revoke`, undefined, ADMIN)).status).toBe(200);
    const revoked = await callback(sessionId, "save_snapshot", token, "snap-3", {}, app);
    expect(revoked.status).toBe(403);
    expect(revoked.body.error.message).toBe(`sandbox token ${b.token_id} was revoked`);
  });

  it("ISSUE21-6 toOpencodeModelId: an anthropic model keeps OpenCode's anthropic provider; api tokens, unknown and archived sessions are refused", async () => {
    const host = uniqueHost("script");
    const agentId = `sba-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ content: "ok" }]);
    const parsed = parseGatewayConfig({
      models: {
        default: "anthropic:claude-sonnet-4",
        providers: {
          anthropic: mockProvider(host, {
            models: { "claude-sonnet-4": { contextWindow: 200000, maxOutputTokens: 4096, supportsTools: true, supportsStreaming: false } },
            defaults: { model: "claude-sonnet-4" },
          }) as never,
        },
      },
      agents: { [agentId]: { tools: { allow: S5_ALLOW } } as never },
    });
    if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
    const app = appFor(parsed.value as GatewayConfig);
    const sessionId = await chatSession(app, agentId, "anthropic-room");
    const path = `/api/admin/sessions/${sessionId}/sandbox-bootstrap`;
    const b = (await call(app, "POST", path, {}, ADMIN)).body;
    expect(b.model).toEqual({
      ref: "anthropic:claude-sonnet-4",
      opencode_model_id: "anthropic/claude-sonnet-4",
      api_model_id: "claude-sonnet-4",
    });
    expect(b.opencode_config.model).toBe("anthropic/claude-sonnet-4");
    expect(b.opencode_config.provider.anthropic.models).toEqual({ "claude-sonnet-4": { name: "claude-sonnet-4" } });
    expect(b.opencode_config.provider.litellm.models).toEqual({});

    expect((await call(app, "POST", path, {}, ALICE)).status).toBe(403);
    const unknown = await call(app, "POST", `/api/admin/sessions/ses_${"0".repeat(32)}/sandbox-bootstrap`, {}, ADMIN);
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe("resource.not_found");
    expect((await call(app, "POST", path, { ttl_seconds: 5 }, ADMIN)).status).toBe(400);
    // After /new the old generation gets no bundle (its callbacks would be 410 anyway).
    const fresh = await call(app, "POST", "/v1/chat/messages", {
      user_id: "u",
      room_id: "anthropic-room",
      agent_id: agentId,
      message: "/new",
    });
    expect(fresh.status).toBe(200);
    const archived = await call(app, "POST", path, {}, ADMIN);
    expect(archived.status).toBe(410);
    expect(archived.body.error.code).toBe("gone");
  });
});

/**
 * What a sandbox receives to run S5's gateway-mediated tools (S5 "Capability Injection", §6.4, §6.5):
 * the tool files (`.opencode/tool/<name>.ts` + `.txt` pairs, setup-only tools only in setup sessions), the
 * OpenCode config, the model id mapping (`toOpencodeModelId`) and the callback client each tool file embeds.
 * Pure text and JSON: the admin route (src/http/admin-sandbox-bootstrap.ts) adds the environment and the token.
 */
import type { ResolvedModel } from "../config/model-ref";
import type { ToolDefinition } from "../tools/registry";

/** S5's contract tools, in S5's table order. */
export const S5_TOOLS = [
  "verify",
  "save_snapshot",
  "automation.complete",
  "save_service_commands",
  "save_env_files",
  "request_env_variables",
] as const;

/** The environment names S5 §6.4 requires in the sandbox runtime. */
export const SANDBOX_ENV = {
  gatewayUrl: "PROLIFERATE_GATEWAY_URL",
  sessionId: "PROLIFERATE_SESSION_ID",
  token: "SANDBOX_MCP_AUTH_TOKEN",
} as const;

/** Where OpenCode reads its config: global and repo-local (S5 §6.4 "both global and repo-local paths"). */
export const OPENCODE_CONFIG_PATHS = ["/home/user/.config/opencode/opencode.json", "opencode.json"] as const;

/** S5 §6.5: the OpenCode server binds to 0.0.0.0:4096. */
export const OPENCODE_START = ["opencode", "serve", "--hostname", "0.0.0.0", "--port", "4096"] as const;

/** S5 §6.5: Anthropic models keep OpenCode's `anthropic` provider; every other model goes through `litellm`. */
export function toOpencodeModelId(model: Pick<ResolvedModel, "providerId" | "apiModelId">): string {
  return `${model.providerId === "anthropic" ? "anthropic" : "litellm"}/${model.apiModelId}`;
}

/**
 * The OpenCode config (S5 §6.5): provider blocks for `anthropic` and `litellm`, the model, `permission`
 * allowing commands but denying `question`, and an empty `mcp`. Tools are not registered here (S5: file
 * discovery). Provider `options` are empty: the gateway issues no LLM-proxy credential (D-042).
 */
export function opencodeConfig(model: Pick<ResolvedModel, "providerId" | "apiModelId">): Record<string, unknown> {
  const id = toOpencodeModelId(model);
  const modelName = id.slice(id.indexOf("/") + 1);
  const models = (p: string) => (id.startsWith(`${p}/`) ? { [modelName]: { name: modelName } } : {});
  return {
    $schema: "https://opencode.ai/config.json",
    model: id,
    provider: {
      anthropic: { options: {}, models: models("anthropic") },
      litellm: { npm: "@ai-sdk/openai-compatible", name: "LiteLLM", options: {}, models: models("litellm") },
    },
    permission: { "*": "allow", question: "deny" },
    mcp: {},
  };
}

/**
 * The callback client every tool file embeds (S5 "Snapshot Boundary Retry Semantics", §Reliability): POSTs
 * `{tool_call_id, args}` to `/proliferate/{session}/tools/{tool}` with the sandbox token; transport failures,
 * timeouts and 5xx answers are retried with exponential backoff, at most MAX_RETRIES times, always with the
 * SAME tool_call_id — the gateway runs a `(tool, tool_call_id)` once and replays its answer, so a retry never
 * repeats an effect. Every failure becomes `{success: false, result}`; nothing is thrown.
 */
export const CALLBACK_CLIENT = `const MAX_RETRIES = 5;
const ATTEMPT_TIMEOUT_MS = 120_000;
const BASE_DELAY_MS = 500;
const RETRYABLE = /ECONNRESET|ECONNREFUSED|ETIMEDOUT|EPIPE|socket hang up|fetch failed|AbortError|TimeoutError/;

async function callGateway(tool, toolCallId, args) {
  const base = String(process.env.${SANDBOX_ENV.gatewayUrl} ?? "").replace(/\\/+$/, "");
  const session = String(process.env.${SANDBOX_ENV.sessionId} ?? "");
  const token = String(process.env.${SANDBOX_ENV.token} ?? "");
  if (!base || !session || !token) return { success: false, result: "sandbox.unavailable: ${SANDBOX_ENV.gatewayUrl}, ${SANDBOX_ENV.sessionId} and ${SANDBOX_ENV.token} must be set" };
  const url = base + "/proliferate/" + encodeURIComponent(session) + "/tools/" + encodeURIComponent(tool);
  const body = JSON.stringify({ tool_call_id: toolCallId, args });
  for (let attempt = 0; ; attempt++) {
    let retry;
    try {
      const res = await fetch(url, {
        method: "POST",
        headers: { authorization: "Bearer " + token, "content-type": "application/json" },
        body,
        signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
      });
      const answer = await res.json().catch(() => null);
      if (res.ok && answer && typeof answer.success === "boolean") return answer;
      if (res.status < 500) return { success: false, result: "gateway " + res.status + ": " + (answer?.error?.message ?? "unexpected answer") };
      retry = "gateway " + res.status;
    } catch (err) {
      retry = [err?.name, err?.message, err?.cause?.code].filter(Boolean).join(" ");
      if (!RETRYABLE.test(retry)) return { success: false, result: "gateway unreachable: " + retry };
    }
    if (attempt >= MAX_RETRIES) return { success: false, result: "gateway unreachable after " + (attempt + 1) + " attempts: " + retry };
    await new Promise((r) => setTimeout(r, BASE_DELAY_MS * 2 ** attempt));
  }
}
`;

/** A JSON Schema (as the registry renders a tool's parameters) as OpenCode `tool.schema` (zod) source. */
function schemaSource(s: Record<string, unknown>): string {
  let out: string;
  const type = s.type;
  if (Array.isArray(s.enum) && s.enum.every((v) => typeof v === "string")) out = `tool.schema.enum(${JSON.stringify(s.enum)})`;
  else if (typeof s.const === "string") out = `tool.schema.literal(${JSON.stringify(s.const)})`;
  else if (type === "string") out = "tool.schema.string()";
  else if (type === "number" || type === "integer") out = type === "integer" ? "tool.schema.number().int()" : "tool.schema.number()";
  else if (type === "boolean") out = "tool.schema.boolean()";
  else if (type === "array") out = `tool.schema.array(${schemaSource((s.items as Record<string, unknown>) ?? {})})`;
  else if (type === "object" && s.properties) out = `tool.schema.object(${objectSource(s)})`;
  else out = "tool.schema.any()";
  return typeof s.description === "string" ? `${out}.describe(${JSON.stringify(s.description)})` : out;
}

/** An object schema's properties as a `{name: schema}` source literal (optional unless required). */
function objectSource(s: Record<string, unknown>): string {
  const props = (s.properties ?? {}) as Record<string, Record<string, unknown>>;
  const required = new Set(Array.isArray(s.required) ? (s.required as string[]) : []);
  const fields = Object.entries(props).map(([k, v]) => `${JSON.stringify(k)}: ${schemaSource(v)}${required.has(k) ? "" : ".optional()"}`);
  return `{ ${fields.join(", ")} }`;
}

/** S5 §6.2: a tool's file base name (`automation.complete` → `automation_complete`). */
export function toolFileName(name: string): string {
  return name.replaceAll(".", "_");
}

/**
 * One tool's wrapper module (OpenCode's `tool()` API): its arguments, and an `execute` that calls the gateway.
 * The idempotency key is fixed before the first attempt — OpenCode's call id, or for `automation.complete` its
 * `completion_id` (S5 §6.3) — so every retry carries the same one.
 */
export function toolModule(def: ToolDefinition): string {
  const key =
    def.name === "automation.complete"
      ? "String(args.completion_id)"
      : `String(context?.callID ?? context?.callId ?? "${toolFileName(def.name)}-" + crypto.randomUUID())`;
  return `// Generated by Sophie Gateway for S5 tool ${def.name}; calls the gateway, which runs it.
import { tool } from "@opencode-ai/plugin";

${CALLBACK_CLIENT}
export default tool({
  description: ${JSON.stringify(def.description)},
  args: ${objectSource(def.parameters)},
  async execute(args, context) {
    const toolCallId = ${key};
    const answer = await callGateway(${JSON.stringify(def.name)}, toolCallId, args);
    return answer.result;
  },
});
`;
}

/** The `.opencode/tool/` files for these tools: a `.ts` wrapper and a `.txt` guidance file each. */
export function toolFiles(defs: readonly ToolDefinition[]): { path: string; content: string }[] {
  return defs.flatMap((def) => [
    { path: `.opencode/tool/${toolFileName(def.name)}.ts`, content: toolModule(def) },
    { path: `.opencode/tool/${toolFileName(def.name)}.txt`, content: `${def.description}\n` },
  ]);
}

/** Helpers for run tests: an app on a run config, HTTP calls, waiting for a run to end, test-only tools. */
import { env } from "cloudflare:workers";
import type { GatewayConfig } from "../../src/config/schema";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { type ToolDefinition, tools } from "../../src/tools/registry";

export const ALICE = "test-api-token-alice-0123456789";
export const BOB = "test-api-token-bob-0123456789ab";
export const ADMIN = "test-admin-token-0123456789abcdef";

export type App = ReturnType<typeof createApp>;

export const appFor = (config: GatewayConfig): App => createApp({ config, logger: createLogger("error") });

/** `POST /v1/runs` with `Prefer: wait=30` as alice: the answer itself (200 with the run if it ended in time, else 202). */
export async function postRunAndWait(app: App, body: { agent_id: string; message: string }): Promise<Response> {
  return app.request(
    "https://gateway.test/v1/runs",
    {
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json", Prefer: "wait=30" },
      body: JSON.stringify(body),
    },
    env,
  );
}

export async function call(app: App, method: string, path: string, body?: unknown, token = ALICE) {
  const res = await app.request(
    `https://gateway.test${path}`,
    {
      method,
      headers: { Authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    },
    env,
  );
  return readResponse(res);
}

/** A response's status, JSON body (null when it is not JSON: SSE, empty), text and headers. */
export async function readResponse(res: Response) {
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    /* SSE or empty */
  }
  return { status: res.status, body: json, text, headers: res.headers };
}

/** Queues a run and returns its id. */
export async function startRun(app: App, message: string, agent = "main", token = ALICE): Promise<string> {
  const res = await call(app, "POST", "/v1/runs", { agent_id: agent, message }, token);
  if (res.status !== 202) throw new Error(`POST /v1/runs answered ${res.status}: ${res.text}`);
  return res.body.id as string;
}

const TERMINAL = new Set(["completed", "failed", "cancelled"]);

/** Polls GET /v1/runs/{id} until the run ends (the SessionDO's alarm runs it in the background). */
export async function waitForRun(app: App, id: string, token = ALICE, timeoutMs = 15_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await call(app, "GET", `/v1/runs/${id}`, undefined, token);
    if (res.status !== 200) throw new Error(`GET run answered ${res.status}: ${res.text}`);
    if (TERMINAL.has(res.body.status)) return res.body;
    if (Date.now() > deadline) throw new Error(`run ${id} still ${res.body.status} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Polls `check` until it holds. */
export async function until(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The run in detail (admin view): events, trace, manifests. */
export async function runDetail(app: App, id: string): Promise<any> {
  const res = await call(app, "GET", `/api/admin/runs/${id}`, undefined, ADMIN);
  if (res.status !== 200) throw new Error(`admin run answered ${res.status}: ${res.text}`);
  return res.body;
}

/** Invocations of the test tools, by tool call id. */
export const invocations: { tool: string; toolCallId: string; runId: string; input: Record<string, unknown> }[] = [];

/** Registers the test-only tools once: echo (read_only), fail (read_only), counter (draft_only, slow when asked). */
export function registerTestTools(): void {
  if (tools.get("test.echo")) return;
  const defs: ToolDefinition[] = [
    {
      name: "test.echo",
      description: "Echoes its input.",
      parameters: { type: "object", properties: { text: { type: "string" } }, additionalProperties: true },
      risk: "read_only",
      handler: async (input, ctx) => {
        invocations.push({ tool: "test.echo", toolCallId: ctx.toolCallId, runId: ctx.runId, input });
        return { ok: true, output: { echoed: input }, summary: `echoed ${Object.keys(input).length} field(s)` };
      },
    },
    {
      name: "test.fail",
      description: "Always fails.",
      parameters: { type: "object", properties: {}, additionalProperties: true },
      risk: "read_only",
      handler: async (input, ctx) => {
        invocations.push({ tool: "test.fail", toolCallId: ctx.toolCallId, runId: ctx.runId, input });
        return { ok: false, error: { code: "tool.input_invalid", message: "no file at missing.txt" } };
      },
    },
    {
      name: "test.counter",
      description: "Counts its calls (has an effect: draft_only); waits delay_ms first.",
      parameters: { type: "object", properties: { delay_ms: { type: "integer" } }, additionalProperties: false },
      risk: "draft_only",
      handler: async (input, ctx) => {
        invocations.push({ tool: "test.counter", toolCallId: ctx.toolCallId, runId: ctx.runId, input });
        if (typeof input.delay_ms === "number") await new Promise((r) => setTimeout(r, input.delay_ms as number));
        return { ok: true, output: { count: invocations.filter((i) => i.runId === ctx.runId && i.tool === "test.counter").length } };
      },
    },
    {
      name: "test.send",
      description: "Sends a message (side_effect: needs approval).",
      parameters: { type: "object", properties: { to: { type: "string" }, text: { type: "string" } }, additionalProperties: false },
      risk: "side_effect",
      handler: async (input, ctx) => {
        invocations.push({ tool: "test.send", toolCallId: ctx.toolCallId, runId: ctx.runId, input });
        return { ok: true, output: { sent: true }, summary: `sent to ${String(input.to)}` };
      },
    },
  ];
  for (const d of defs) tools.register(d);
}

/** Builders for configurations used across tests. */
import { parseGatewayConfig } from "../../src/config/parse";
import type { GatewayConfig, GatewayConfigInput } from "../../src/config/schema";

/** A provider block pointing at the mock provider scenario `host`. */
export function mockProvider(host: string, overrides: Record<string, unknown> = {}) {
  return {
    baseUrl: `https://${host}/v1`,
    startupValidation: "warn",
    models: {
      "kimi-k1-128k": { contextWindow: 131072, maxOutputTokens: 4096, supportsTools: true, supportsStreaming: true },
    },
    defaults: { model: "kimi-k1-128k" },
    ...overrides,
  };
}

/** A valid config whose default provider is `moonshot` at the mock host, with overrides on the provider. */
export function testConfig(host = "ok.provider.test", providerOverrides: Record<string, unknown> = {}): GatewayConfig {
  const raw: GatewayConfigInput = {
    models: { default: "moonshot:kimi-k1-128k", providers: { moonshot: mockProvider(host, providerOverrides) as never } },
    agents: { main: {} },
  };
  const result = parseGatewayConfig(raw);
  if (!result.ok) throw new Error(`test config invalid: ${JSON.stringify(result.issues)}`);
  return result.value;
}

/** A unique host for the given mock scenario, so a test counts only its own requests. */
export function uniqueHost(scenario: string): string {
  return `${scenario}-${crypto.randomUUID().slice(0, 8)}.provider.test`;
}

/** Requests the mock network saw for `host`. */
export async function requestsTo(host: string): Promise<{ method: string; path: string; authorized: boolean }[]> {
  const res = await fetch(`https://mock.control/requests?host=${encodeURIComponent(host)}`);
  return res.json();
}

/** A config for run tests: the `main` agent on the mock provider at `host`, with agent and runs overrides. */
export function runConfig(
  host: string,
  o: {
    model?: Record<string, unknown>;
    agent?: Record<string, unknown>;
    runs?: Record<string, unknown>;
    policy?: Record<string, unknown>;
    logging?: Record<string, unknown>;
    provider?: Record<string, unknown>;
    agentId?: string;
    scheduler?: Record<string, unknown>;
    channels?: Record<string, unknown>;
    openai?: Record<string, unknown>;
    /** Issue 25 §2: `usage` (alerts), and more agents configured like the first (same tools, same overrides). */
    usage?: Record<string, unknown>;
    moreAgents?: string[];
  } = {},
): GatewayConfig {
  const raw: GatewayConfigInput = {
    models: {
      default: "moonshot:kimi-k1-128k",
      providers: {
        moonshot: mockProvider(host, {
          models: {
            "kimi-k1-128k": { contextWindow: 131072, maxOutputTokens: 4096, supportsTools: true, supportsStreaming: false, ...o.model },
          },
          ...o.provider,
        }) as never,
      },
    },
    agents: Object.fromEntries(
      [o.agentId ?? "main", ...(o.moreAgents ?? [])].map((id) => [
        id,
        { tools: { allow: ["test.echo", "test.fail", "test.counter", "test.send"] }, ...o.agent } as never,
      ]),
    ),
    ...(o.runs ? { runs: o.runs as never } : {}),
    ...(o.policy ? { tools: { policy: o.policy as never } } : {}),
    ...(o.logging ? { logging: o.logging as never } : {}),
    ...(o.scheduler ? { scheduler: o.scheduler as never } : {}),
    ...(o.channels ? { channels: o.channels as never } : {}),
    ...(o.openai ? { openai: o.openai as never } : {}),
    ...(o.usage ? { usage: o.usage as never } : {}),
  };
  const result = parseGatewayConfig(raw);
  if (!result.ok) throw new Error(`test config invalid: ${JSON.stringify(result.issues)}`);
  return result.value;
}

/** Scripts the replies of a `script-…` mock provider host, in order. */
export async function scriptProvider(host: string, steps: import("./outbound").ScriptStep[]): Promise<void> {
  await fetch(`https://mock.control/script?host=${encodeURIComponent(host)}`, { method: "POST", body: JSON.stringify(steps) });
}

/** Opens a gated `script-…` host's gate (issue 33, `gate` in its step): its stream sends its content from here on. */
export async function openGate(host: string): Promise<void> {
  await fetch(`https://mock.control/open?host=${encodeURIComponent(host)}`, { method: "POST" });
}

/** The request bodies a `script-…` host received. */
export async function bodiesSentTo(host: string): Promise<{ model: string; stream?: boolean; messages: any[]; tools?: any[] }[]> {
  return (await fetch(`https://mock.control/bodies?host=${encodeURIComponent(host)}`)).json();
}

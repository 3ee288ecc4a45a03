/**
 * Configuration (issue 2; S1 §1.2): one strict Zod schema, unknown keys
 * rejected at every level, secrets refused by name and by value, cross
 * references checked. Errors name the path and never echo a secret value.
 */
import JSON5 from "json5";
import { describe, expect, it } from "vitest";
import { formatConfigIssues } from "../../src/config/issues";
import { bundledConfig } from "../../src/config/load";
import { parseGatewayConfig } from "../../src/config/parse";
import { isSecretFieldName } from "../../src/security/secret-patterns";
import canonicalText from "../fixtures/s1-canonical-provider.json5?raw";

/** A minimal valid config as raw input, deep-copied so tests can mutate it. */
function base(): Record<string, any> {
  return {
    http: { maxBodyBytes: 1048576 },
    models: {
      default: "moonshot:kimi-k1-128k",
      providers: {
        moonshot: {
          enabled: true,
          baseUrl: "https://api.moonshot.cn/v1",
          startupValidation: "warn",
          models: { "kimi-k1-128k": { contextWindow: 131072, maxOutputTokens: 4096, supportsTools: true, supportsStreaming: true } },
          defaults: { model: "kimi-k1-128k" },
        },
      },
    },
    agents: { main: { model: "moonshot:kimi-k1-128k" } },
    channels: {},
    tools: { policy: {} },
    logging: { level: "info" },
    scheduler: {},
  };
}

function issues(raw: unknown) {
  const result = parseGatewayConfig(raw);
  if (result.ok) throw new Error("expected the config to be rejected");
  return result.issues;
}

describe("S1 §1.2 canonical provider example", () => {
  it("US-CONFIG-001 the canonical JSON5 block from S1 §1.2 is accepted verbatim", () => {
    const raw = JSON5.parse(canonicalText);
    const result = parseGatewayConfig(raw);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    const moonshot = result.value.models.providers.moonshot;
    expect(moonshot).toEqual({
      kind: "openai_compatible",
      enabled: true,
      baseUrl: "https://api.moonshot.cn/v1",
      startupValidation: "warn",
      local: false,
      models: {
        "kimi-k1-128k": { contextWindow: 131072, maxOutputTokens: 4096, supportsTools: true, supportsStreaming: true, enabled: true },
        "kimi-k1-32k": { contextWindow: 32768, maxOutputTokens: 4096, supportsTools: true, supportsStreaming: true, enabled: true },
      },
      defaults: { model: "kimi-k1-128k" },
    });
    // Every other section takes its default.
    expect(result.value.http).toEqual({ maxBodyBytes: 1048576, idempotency: { retentionSeconds: 86400 } });
    expect(result.value.agents).toEqual({});
    expect(parseGatewayConfig({ ...raw, agents: { main: {} } })).toMatchObject({
      ok: true,
      value: {
        agents: {
          main: {
            session: { maxTurns: 500, maxBytes: 2097152 },
            context: { perMessage: 1400, toolSummary: 220, toolError: 320, toolOutput: 1000, total: 12000 },
          },
        },
      },
    });
    expect(result.value.logging).toEqual({ level: "info", debugContent: { enabled: false, redactEmails: true, redactPhones: true } });
  });

  it("the canonical block is accepted as models.providers alongside models.default", () => {
    const raw = JSON5.parse(canonicalText);
    raw.models.default = "moonshot:kimi-k1-32k";
    expect(parseGatewayConfig(raw).ok).toBe(true);
  });

  it("the shipped config/gateway.json5 is valid and defines agent main", () => {
    const config = bundledConfig();
    expect(Object.keys(config.agents)).toContain("main");
    expect(config.models.default).toBe("moonshot:kimi-k1-128k");
  });
});

describe("unknown keys are rejected at every level (fail-closed)", () => {
  const levels: [string, (c: Record<string, any>) => void, string][] = [
    ["top level", (c) => (c.extra = 1), "extra"],
    ["http", (c) => (c.http.extra = 1), "http.extra"],
    ["models", (c) => (c.models.extra = 1), "models.extra"],
    ["a provider", (c) => (c.models.providers.moonshot.extra = 1), "models.providers.moonshot.extra"],
    [
      "a model",
      (c) => (c.models.providers.moonshot.models["kimi-k1-128k"].extra = 1),
      "models.providers.moonshot.models.kimi-k1-128k.extra",
    ],
    ["provider defaults", (c) => (c.models.providers.moonshot.defaults.extra = 1), "models.providers.moonshot.defaults.extra"],
    ["structured model ref", (c) => (c.models.default = { provider: "moonshot", model: "kimi-k1-128k", extra: 1 }), "models.default.extra"],
    ["an agent", (c) => (c.agents.main.extra = 1), "agents.main.extra"],
    ["channels", (c) => (c.channels.extra = 1), "channels.extra"],
    ["tools", (c) => (c.tools.extra = 1), "tools.extra"],
    ["tools.policy", (c) => (c.tools.policy.extra = 1), "tools.policy.extra"],
    ["logging", (c) => (c.logging.extra = 1), "logging.extra"],
    ["scheduler", (c) => (c.scheduler.extra = 1), "scheduler.extra"],
  ];
  for (const [level, mutate, path] of levels) {
    it(`unknown key in ${level} → rejected at ${path}`, () => {
      const raw = base();
      mutate(raw);
      const found = issues(raw);
      expect(found[0]?.path).toBe(path);
    });
  }

  it("the message says why", () => {
    const raw = base();
    raw.logging.colour = "blue";
    expect(issues(raw)).toEqual([{ path: "logging.colour", message: "unknown key (configuration is strict: unknown keys are rejected)" }]);
  });
});

describe("secrets in config are refused (S1 §1.2 'No secrets in config')", () => {
  const byName: [string, (c: Record<string, any>) => void, string, string][] = [
    [
      "apiKey on a provider",
      (c) => (c.models.providers.moonshot.apiKey = "x"),
      "models.providers.moonshot.apiKey",
      "secrets are not allowed in config — set MOONSHOT_API_KEY as a Worker secret (wrangler secret put, or .dev.vars locally)",
    ],
    [
      "api_key on a provider",
      (c) => (c.models.providers.moonshot.api_key = "x"),
      "models.providers.moonshot.api_key",
      "secrets are not allowed in config — set MOONSHOT_API_KEY as a Worker secret (wrangler secret put, or .dev.vars locally)",
    ],
    [
      "botToken in channels",
      (c) => (c.channels.botToken = "x"),
      "channels.botToken",
      "secrets are not allowed in config — supply it as a Worker secret (wrangler secret put, or .dev.vars locally)",
    ],
    [
      "password on an agent",
      (c) => (c.agents.main.password = "hunter2"),
      "agents.main.password",
      "secrets are not allowed in config — supply it as a Worker secret (wrangler secret put, or .dev.vars locally)",
    ],
    [
      "client_secret at the top",
      (c) => (c.client_secret = "x"),
      "client_secret",
      "secrets are not allowed in config — supply it as a Worker secret (wrangler secret put, or .dev.vars locally)",
    ],
    [
      "credentials nested deep",
      (c) => (c.tools.policy.credentials = { user: "a" }),
      "tools.policy.credentials",
      "secrets are not allowed in config — supply it as a Worker secret (wrangler secret put, or .dev.vars locally)",
    ],
  ];
  for (const [name, mutate, path, message] of byName) {
    it(`a field named like a credential: ${name}`, () => {
      const raw = base();
      mutate(raw);
      expect(issues(raw)[0]).toEqual({ path, message });
    });
  }

  const byValue: [string, string, string][] = [
    ["an OpenAI-style key", "sk-abcdefghijklmnopqrstuvwxyz0123456789", "openai_style_key"],
    ["a GitHub token", `ghp_${"a1B2".repeat(9)}`, "github_token"],
    ["a Slack bot token", "xoxb-123456789012-1234567890123-abcdefABCDEF", "slack_token"],
    ["a JWT", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt"],
    ["a private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIE...", "private_key"],
    ["a URL with a password", "https://admin:hunter2@api.example.com/v1", "url_password"],
    ["a Telegram bot token", "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "telegram_bot_token"],
    ["a random-looking 40-character token", "Zx8kQ2vN7pL4mR9tW3yB6cF1hJ5sD0gK8aE2uXo7", "high_entropy_token"],
  ];
  for (const [name, value, kind] of byValue) {
    it(`a value that looks like a credential: ${name} → ${kind}, value not echoed`, () => {
      const raw = base();
      raw.agents.main.description = value;
      const [issue] = issues(raw);
      expect(issue).toEqual({
        path: "agents.main.description",
        message: `value looks like a credential (${kind}); secrets are not allowed in config — supply it as a Worker secret`,
      });
      expect(JSON.stringify(issue)).not.toContain(value.slice(0, 12));
    });
  }

  it("counters named with 'Tokens' are not credentials", () => {
    expect(isSecretFieldName("maxOutputTokens")).toBe(false);
    expect(isSecretFieldName("contextWindow")).toBe(false);
    expect(isSecretFieldName("minimumContextTokens")).toBe(false);
    expect(isSecretFieldName("keys")).toBe(false);
    expect(isSecretFieldName("botToken")).toBe(true);
    expect(isSecretFieldName("API_KEY")).toBe(true);
    expect(isSecretFieldName("signingKey")).toBe(true);
    expect(parseGatewayConfig(base()).ok).toBe(true);
  });

  it("settings about a credential are not credentials; the credential word must name the field's value", () => {
    expect(isSecretFieldName("sandboxTokenTtlSeconds")).toBe(false);
    expect(isSecretFieldName("tokenUrl")).toBe(false);
    expect(isSecretFieldName("secretsRetentionDays")).toBe(false);
    expect(isSecretFieldName("apiKeyValue")).toBe(true);
    expect(isSecretFieldName("client_secret")).toBe(true);
    expect(isSecretFieldName("bot_token_b64")).toBe(true);
    expect(isSecretFieldName("privateKey")).toBe(true);
    expect(isSecretFieldName("key")).toBe(false);
  });

  it("the parsed config, defaults and all, passes its own validation again (GET /api/admin/config → POST round-trips)", () => {
    const parsed = parseGatewayConfig(base());
    if (!parsed.ok) throw new Error("base config invalid");
    expect(parseGatewayConfig(JSON.parse(JSON.stringify(parsed.value)))).toEqual(parsed);
  });

  it("ordinary prose, URLs, model ids and SHA-256 hex are not mistaken for credentials", () => {
    const raw = base();
    raw.agents.main.description = "Summarises the repository status every morning";
    raw.models.providers.moonshot.baseUrl = "https://api.moonshot.cn/v1";
    raw.agents.notes = { description: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" };
    expect(parseGatewayConfig(raw).ok).toBe(true);
  });
});

describe("cross references and value rules", () => {
  it("models.default must name a configured model", () => {
    const raw = base();
    raw.models.default = "moonshot:kimi-k9";
    expect(issues(raw)).toEqual([{ path: "models.default", message: 'unknown model "kimi-k9" for provider "moonshot"' }]);
  });

  it("an agent's model must resolve", () => {
    const raw = base();
    raw.agents.main.model = "openai:gpt-4o";
    expect(issues(raw)).toEqual([{ path: "agents.main.model", message: 'unknown provider "openai"' }]);
  });

  it("the default may not point at a disabled model", () => {
    const raw = base();
    raw.models.providers.moonshot.models["kimi-k1-128k"].enabled = false;
    expect(issues(raw)).toEqual([
      { path: "models.default", message: 'model "moonshot:kimi-k1-128k" is disabled' },
      { path: "agents.main.model", message: 'model "moonshot:kimi-k1-128k" is disabled' },
    ]);
  });

  it("without models.default, one provider with defaults.model decides; two are ambiguous", () => {
    const raw = base();
    delete raw.models.default;
    expect(parseGatewayConfig(raw).ok).toBe(true);
    raw.models.providers.other = { ...structuredClone(raw.models.providers.moonshot), baseUrl: "https://other.example/v1" };
    expect(issues(raw)).toEqual([{ path: "models.default", message: "no default model: set models.default" }]);
  });

  it("provider defaults.model must be one of its models", () => {
    const raw = base();
    raw.models.providers.moonshot.defaults.model = "nope";
    expect(issues(raw)).toEqual([
      { path: "models.providers.moonshot.defaults.model", message: '"nope" is not one of this provider\'s models' },
    ]);
  });

  it("maxOutputTokens must be smaller than contextWindow", () => {
    const raw = base();
    raw.models.providers.moonshot.models["kimi-k1-128k"].maxOutputTokens = 131072;
    expect(issues(raw)[0]).toEqual({
      path: "models.providers.moonshot.models.kimi-k1-128k.maxOutputTokens",
      message: "maxOutputTokens must be smaller than contextWindow",
    });
  });

  it("remote providers must use https; local ones may use http", () => {
    const raw = base();
    raw.models.providers.moonshot.baseUrl = "http://api.moonshot.cn/v1";
    expect(issues(raw)[0]?.path).toBe("models.providers.moonshot.baseUrl");
    raw.models.providers.moonshot.local = true;
    expect(parseGatewayConfig(raw).ok).toBe(true);
  });

  it("required model fields are reported as required", () => {
    const raw = base();
    delete raw.models.providers.moonshot.models["kimi-k1-128k"].supportsTools;
    expect(issues(raw)).toEqual([{ path: "models.providers.moonshot.models.kimi-k1-128k.supportsTools", message: "required" }]);
  });

  it("startupValidation accepts only strict|warn|off", () => {
    const raw = base();
    raw.models.providers.moonshot.startupValidation = "loud";
    expect(issues(raw)[0]?.path).toBe("models.providers.moonshot.startupValidation");
  });

  it("provider ids must be usable as env var prefixes", () => {
    const raw = base();
    raw.models.providers["my-provider"] = structuredClone(raw.models.providers.moonshot);
    expect(issues(raw)[0]).toEqual({
      path: "models.providers.my-provider",
      message: "provider ids are lower-case letters, digits and _ (at most 32), starting with a letter",
    });
  });

  it("errors render as one line saying what and where", () => {
    const raw = base();
    raw.extra = 1;
    raw.logging.colour = "blue";
    expect(formatConfigIssues("config/gateway.json5", issues(raw))).toBe(
      "config/gateway.json5: logging.colour: unknown key (configuration is strict: unknown keys are rejected) (and 1 more problem)",
    );
  });
});

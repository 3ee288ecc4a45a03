/**
 * Model refs (S1 §1.4) and provider auth resolution (S1 §1.3).
 */
import { describe, expect, it } from "vitest";
import {
  MINIMUM_CONTEXT_TOKENS,
  ModelRefError,
  parseModelRef,
  resolveAgentModel,
  resolveConfiguredModelRef,
  toApiModelId,
} from "../../src/config/model-ref";
import { parseGatewayConfig } from "../../src/config/parse";
import type { GatewayConfig } from "../../src/config/schema";
import { providerKeyVariable, resolveProviderApiKey } from "../../src/providers/api-key";

function config(): GatewayConfig {
  const result = parseGatewayConfig({
    models: {
      default: "moonshot:kimi-k1-128k",
      providers: {
        moonshot: {
          baseUrl: "https://api.moonshot.cn/v1",
          models: {
            "kimi-k1-128k": { contextWindow: 131072, maxOutputTokens: 4096, supportsTools: true, supportsStreaming: true },
            "kimi-k1-32k": { contextWindow: 32768, maxOutputTokens: 2048, supportsTools: false, supportsStreaming: false },
            "kimi-small": { contextWindow: 8192, maxOutputTokens: 1024, supportsTools: false, supportsStreaming: true },
            "kimi-old": { contextWindow: 8192, maxOutputTokens: 1024, supportsTools: false, supportsStreaming: false, enabled: false },
            "kimi-latest": {
              contextWindow: 131072,
              maxOutputTokens: 4096,
              supportsTools: true,
              supportsStreaming: true,
              apiModelId: "moonshot-v1-128k",
            },
          },
        },
        ollama: {
          local: true,
          baseUrl: "http://127.0.0.1:11434/v1",
          models: { "llama3:8b": { contextWindow: 8192, maxOutputTokens: 1024, supportsTools: false, supportsStreaming: true } },
        },
        retired: {
          enabled: false,
          baseUrl: "https://retired.example/v1",
          models: { m: { contextWindow: 8192, maxOutputTokens: 1024, supportsTools: false, supportsStreaming: false } },
        },
      },
    },
    agents: { main: {}, coder: { model: { provider: "moonshot", model: "kimi-k1-32k" } } },
  });
  if (!result.ok) throw new Error(JSON.stringify(result.issues));
  return result.value;
}

describe("resolveConfiguredModelRef (S1 §1.4)", () => {
  it("US-MODEL-001 resolves the canonical string form moonshot:kimi-k1-128k", () => {
    expect(resolveConfiguredModelRef(config(), "moonshot:kimi-k1-128k")).toEqual({
      providerId: "moonshot",
      modelId: "kimi-k1-128k",
      ref: "moonshot:kimi-k1-128k",
      apiModelId: "kimi-k1-128k",
      contextWindow: 131072,
      maxOutputTokens: 4096,
      supportsTools: true,
      supportsStreaming: true,
      baseUrl: "https://api.moonshot.cn/v1",
      local: false,
    });
  });

  it("US-MODEL-002 resolves the structured form { provider, model } to the same result", () => {
    const c = config();
    expect(resolveConfiguredModelRef(c, { provider: "moonshot", model: "kimi-k1-32k" })).toEqual(
      resolveConfiguredModelRef(c, "moonshot:kimi-k1-32k"),
    );
    expect(resolveConfiguredModelRef(c, { provider: "moonshot", model: "kimi-k1-32k" })).toMatchObject({
      contextWindow: 32768,
      maxOutputTokens: 2048,
      supportsTools: false,
      supportsStreaming: false,
    });
  });

  it("the model part may contain ':' (split at the first colon only)", () => {
    expect(parseModelRef("ollama:llama3:8b")).toEqual({ providerId: "ollama", modelId: "llama3:8b" });
    expect(resolveConfiguredModelRef(config(), "ollama:llama3:8b").modelId).toBe("llama3:8b");
  });

  it("apiModelId maps the config's model id to the id sent on the wire", () => {
    expect(resolveConfiguredModelRef(config(), "moonshot:kimi-latest").apiModelId).toBe("moonshot-v1-128k");
  });

  it("S5 §6.5: toApiModelId maps canonical refs (string or object) to the provider API id, and refuses what does not resolve", () => {
    expect(toApiModelId(config(), "moonshot:kimi-latest")).toBe("moonshot-v1-128k");
    expect(toApiModelId(config(), { provider: "moonshot", model: "kimi-latest" })).toBe("moonshot-v1-128k");
    expect(toApiModelId(config(), "moonshot:kimi-k1-128k")).toBe("kimi-k1-128k");
    expect(toApiModelId(config(), "ollama:llama3:8b")).toBe("llama3:8b");
    expect(() => toApiModelId(config(), "moonshot:kimi-k9")).toThrow('unknown model "kimi-k9" for provider "moonshot"');
  });

  const failures: [string, string, string][] = [
    ["unknown provider", "openai:gpt-4o", 'unknown provider "openai"'],
    ["disabled provider", "retired:m", 'provider "retired" is disabled'],
    ["unknown model", "moonshot:kimi-k9", 'unknown model "kimi-k9" for provider "moonshot"'],
    ["disabled model", "moonshot:kimi-old", 'model "moonshot:kimi-old" is disabled'],
    ["no colon", "kimi-k1-128k", 'invalid model ref "kimi-k1-128k": expected "provider:model" or { provider, model }'],
    ["empty provider", ":kimi", 'invalid model ref ":kimi": expected "provider:model" or { provider, model }'],
    ["empty model", "moonshot:", 'invalid model ref "moonshot:": expected "provider:model" or { provider, model }'],
    ["prototype key as provider", "__proto__:x", 'unknown provider "__proto__"'],
    ["prototype key as model", "moonshot:constructor", 'unknown model "constructor" for provider "moonshot"'],
  ];
  for (const [name, ref, message] of failures) {
    it(`${name}: ${ref} → ModelRefError "${message}"`, () => {
      expect(() => resolveConfiguredModelRef(config(), ref)).toThrow(ModelRefError);
      expect(() => resolveConfiguredModelRef(config(), ref)).toThrow(message);
    });
  }

  it("S1 §1.5 the MINIMUM_CONTEXT_TOKENS clamp applies to local providers only", () => {
    expect(MINIMUM_CONTEXT_TOKENS).toBe(16384);
    expect(resolveConfiguredModelRef(config(), "ollama:llama3:8b").contextWindow).toBe(16384);
    expect(resolveConfiguredModelRef(config(), "moonshot:kimi-small").contextWindow).toBe(8192);
  });

  it("agents use their own model, else models.default", () => {
    expect(resolveAgentModel(config(), "coder").ref).toBe("moonshot:kimi-k1-32k");
    expect(resolveAgentModel(config(), "main").ref).toBe("moonshot:kimi-k1-128k");
  });
});

describe("provider auth resolution (S1 §1.3)", () => {
  it("US-AUTH-001 a missing key fails with exactly `Missing MOONSHOT_API_KEY`", () => {
    expect(() => resolveProviderApiKey({}, "moonshot", { local: false })).toThrow(/^Missing MOONSHOT_API_KEY$/);
  });

  it("an empty or whitespace key counts as missing", () => {
    expect(() => resolveProviderApiKey({ MOONSHOT_API_KEY: "" }, "moonshot", { local: false })).toThrow(/^Missing MOONSHOT_API_KEY$/);
    expect(() => resolveProviderApiKey({ MOONSHOT_API_KEY: "  " }, "moonshot", { local: false })).toThrow(/^Missing MOONSHOT_API_KEY$/);
  });

  it("the key comes from <PROVIDERID>_API_KEY and nowhere else — no other provider's key is tried", () => {
    const env = { OPENAI_API_KEY: "sk-other-0123456789abcdefghij", API_KEY: "generic", moonshot_api_key: "lower" };
    expect(() => resolveProviderApiKey(env, "moonshot", { local: false })).toThrow(/^Missing MOONSHOT_API_KEY$/);
    expect(resolveProviderApiKey({ MOONSHOT_API_KEY: "mk-live-0123456789" }, "moonshot", { local: false })).toBe("mk-live-0123456789");
  });

  it("local providers need no key", () => {
    expect(resolveProviderApiKey({}, "ollama", { local: true })).toBeUndefined();
    expect(resolveProviderApiKey({ OLLAMA_API_KEY: "k-0123456789" }, "ollama", { local: true })).toBe("k-0123456789");
  });

  it("the variable name is the provider id upper-cased plus _API_KEY", () => {
    expect(providerKeyVariable("moonshot")).toBe("MOONSHOT_API_KEY");
    expect(providerKeyVariable("my_vllm")).toBe("MY_VLLM_API_KEY");
  });
});

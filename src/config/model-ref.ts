/**
 * Model references (S1 §1.4): `provider:model` or `{ provider, model }`,
 * resolved against the configuration into everything a caller of the model
 * needs to know before any network call.
 */
import type { GatewayConfig, ModelPricing, ModelRefInput } from "./schema";

/**
 * Local providers report or default to small windows; their effective context
 * window is clamped up to this many tokens (S1 §1.5). Never applied to remote
 * providers such as Moonshot.
 */
export const MINIMUM_CONTEXT_TOKENS = 16_384;

/** A model reference resolved against the configuration. */
export interface ResolvedModel {
  providerId: string;
  modelId: string;
  /** Canonical `provider:model` form. */
  ref: string;
  /** The model id sent on the wire (S5 §6.5 mapping); `modelId` unless the config says otherwise. */
  apiModelId: string;
  contextWindow: number;
  maxOutputTokens: number;
  supportsTools: boolean;
  supportsStreaming: boolean;
  baseUrl: string;
  local: boolean;
  /** Issue 25 §2: USD per million tokens, frozen with the run; absent = unpriced (cost null). */
  pricing?: ModelPricing;
}

/** Why a model reference could not be resolved. */
export type ModelRefFailure =
  | { reason: "malformed"; ref: string }
  | { reason: "unknown_provider"; providerId: string }
  | { reason: "provider_disabled"; providerId: string }
  | { reason: "unknown_model"; providerId: string; modelId: string }
  | { reason: "model_disabled"; providerId: string; modelId: string }
  | { reason: "no_default" };

/** Thrown by `resolveConfiguredModelRef`; `message` is safe to show. */
export class ModelRefError extends Error {
  readonly failure: ModelRefFailure;
  constructor(failure: ModelRefFailure) {
    super(describeModelRefFailure(failure));
    this.name = "ModelRefError";
    this.failure = failure;
  }
}

/** One sentence for each failure reason. */
export function describeModelRefFailure(f: ModelRefFailure): string {
  switch (f.reason) {
    case "malformed":
      return `invalid model ref "${f.ref}": expected "provider:model" or { provider, model }`;
    case "unknown_provider":
      return `unknown provider "${f.providerId}"`;
    case "provider_disabled":
      return `provider "${f.providerId}" is disabled`;
    case "unknown_model":
      return `unknown model "${f.modelId}" for provider "${f.providerId}"`;
    case "model_disabled":
      return `model "${f.providerId}:${f.modelId}" is disabled`;
    case "no_default":
      return "no default model: set models.default";
  }
}

/** Splits a ref into provider and model; the model part may itself contain `:`. */
export function parseModelRef(ref: ModelRefInput): { providerId: string; modelId: string } {
  if (typeof ref !== "string") return { providerId: ref.provider, modelId: ref.model };
  const colon = ref.indexOf(":");
  if (colon <= 0 || colon === ref.length - 1) throw new ModelRefError({ reason: "malformed", ref });
  return { providerId: ref.slice(0, colon), modelId: ref.slice(colon + 1) };
}

/**
 * Resolves a model ref against the configuration: the provider and model must
 * exist and be enabled. Never falls back to another provider or model (S1 §0.4).
 */
export function resolveConfiguredModelRef(config: Pick<GatewayConfig, "models">, ref: ModelRefInput): ResolvedModel {
  const { providerId, modelId } = parseModelRef(ref);
  const provider = Object.hasOwn(config.models.providers, providerId) ? config.models.providers[providerId] : undefined;
  if (!provider) throw new ModelRefError({ reason: "unknown_provider", providerId });
  if (!provider.enabled) throw new ModelRefError({ reason: "provider_disabled", providerId });
  const model = Object.hasOwn(provider.models, modelId) ? provider.models[modelId] : undefined;
  if (!model) throw new ModelRefError({ reason: "unknown_model", providerId, modelId });
  if (!model.enabled) throw new ModelRefError({ reason: "model_disabled", providerId, modelId });
  return {
    providerId,
    modelId,
    ref: `${providerId}:${modelId}`,
    apiModelId: model.apiModelId ?? modelId,
    contextWindow: provider.local ? Math.max(model.contextWindow, MINIMUM_CONTEXT_TOKENS) : model.contextWindow,
    maxOutputTokens: model.maxOutputTokens,
    supportsTools: model.supportsTools,
    supportsStreaming: model.supportsStreaming,
    baseUrl: provider.baseUrl,
    local: provider.local,
    ...(model.pricing ? { pricing: { ...model.pricing } } : {}),
  };
}

/**
 * The gateway-wide default model ref: `models.default`, or else the one
 * provider that declares `defaults.model`. Ambiguity is an error, not a guess.
 */
/**
 * S5 §6.5 analogue: a canonical model ref (`provider:model` or `{provider, model}`) → the model id the
 * provider's API expects (`models.providers.<p>.models.<m>.apiModelId`, else the model id itself). The one
 * place this mapping happens; the provider adapter sends `ResolvedModel.apiModelId`, which is this.
 * Throws `ModelRefError` for a ref that does not resolve.
 */
export function toApiModelId(config: Pick<GatewayConfig, "models">, ref: ModelRefInput): string {
  return resolveConfiguredModelRef(config, ref).apiModelId;
}

export function defaultModelRef(config: Pick<GatewayConfig, "models">): ModelRefInput {
  if (config.models.default !== undefined) return config.models.default;
  const candidates = Object.entries(config.models.providers).filter(([, p]) => p.enabled && p.defaults);
  if (candidates.length !== 1) throw new ModelRefError({ reason: "no_default" });
  const [providerId, provider] = candidates[0] as [string, (typeof candidates)[number][1]];
  return `${providerId}:${provider.defaults?.model}`;
}

/** The model an agent runs on: its own `model`, else the gateway default. */
export function resolveAgentModel(config: Pick<GatewayConfig, "models" | "agents">, agentId: string): ResolvedModel {
  const agent = Object.hasOwn(config.agents, agentId) ? config.agents[agentId] : undefined;
  return resolveConfiguredModelRef(config, agent?.model ?? defaultModelRef(config));
}

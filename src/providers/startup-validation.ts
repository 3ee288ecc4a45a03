/**
 * Startup validation of the default model (S1 §1.6, DESIGN §2).
 *
 * Workers have no process start, so validation runs once per isolate: under
 * `strict`, before the first turn an HTTP door takes (src/http/turns.ts
 * `providerReady`), which is refused (503, one actionable line) until the
 * default model validates; under `warn` and `off` no turn waits for it. Every
 * mode but `off` is checked by `GET /healthz?deep=1` and `GET /api/admin/status`,
 * where `warn` logs its one warning line and carries on. Neither the outcome nor
 * the log ever contains the key.
 */
import OpenAI from "openai";
import { defaultModelRef, type ResolvedModel, resolveConfiguredModelRef } from "../config/model-ref";
import type { GatewayConfig, StartupValidationMode } from "../config/schema";
import { GatewayError } from "../errors";
import type { Logger } from "../observability/logger";
import { type SecretOrigins, secretOrigins } from "../security/secret-origins";
import { providerKeyVariable, resolveBoundProviderKey } from "./api-key";
import { createProviderClient } from "./client";

/** How long one validation may take before the provider counts as unreachable. */
export const VALIDATION_TIMEOUT_MS = 5_000;
/** A failed validation is retried no sooner than this, so callers cannot hammer the provider. */
export const VALIDATION_RETRY_AFTER_MS = 30_000;

/** Why a validation failed, as a stable code (logged), plus a sentence for operators. */
export type ValidationFailure =
  | "missing_key"
  | "key_withheld"
  | "auth_rejected"
  | "model_not_offered"
  | "unreachable"
  | "timeout"
  | "provider_error";

export interface ValidationOutcome {
  mode: StartupValidationMode;
  status: "ok" | "failed" | "skipped";
  provider: string;
  model: string;
  reason?: ValidationFailure;
  /** One actionable line; present when `status` is "failed". */
  message?: string;
  /** Milliseconds since the epoch at which this outcome was reached. */
  checkedAt: number;
}

export interface ValidationOptions {
  /** Clock, in milliseconds since the epoch. */
  now?: () => number;
  /** How long the provider may take to answer. */
  timeoutMs?: number;
  /** The fetch the provider client uses; the runtime's by default. */
  fetch?: typeof fetch;
}

/** Where the deployment's own config sends each key; absent: `config` is the deployment's own (tests). */
export type DeploymentOrigins = SecretOrigins | undefined;

/** Checks that the default model's provider is reachable with its key and offers the model. */
export async function validateDefaultModel(
  env: object,
  config: GatewayConfig,
  options: ValidationOptions = {},
  deployment?: DeploymentOrigins,
): Promise<ValidationOutcome> {
  const now = options.now ?? Date.now;
  const timeoutMs = options.timeoutMs ?? VALIDATION_TIMEOUT_MS;
  const model = resolveConfiguredModelRef(config, defaultModelRef(config));
  const provider = config.models.providers[model.providerId];
  const mode = provider?.startupValidation ?? "warn";
  const base = { mode, provider: model.providerId, model: model.modelId };
  if (mode === "off") return { ...base, status: "skipped", checkedAt: now() };

  const fail = (reason: ValidationFailure, detail: string): ValidationOutcome => ({
    ...base,
    status: "failed",
    reason,
    message: `startup validation (${mode}) failed for ${model.ref}: ${detail}`,
    checkedAt: now(),
  });

  let apiKey: string | undefined;
  try {
    // The probe sends the key too: only to the origin it is bound to (issue 20 §5).
    apiKey = resolveBoundProviderKey(env, model.providerId, model, deployment ?? secretOrigins(config));
  } catch (err) {
    if (!(err instanceof GatewayError)) throw err;
    const variable = providerKeyVariable(model.providerId);
    if (!err.message.startsWith("Missing ")) return fail("key_withheld", err.message);
    return fail("missing_key", `${err.message} — set it with "wrangler secret put ${variable}" (or in .dev.vars locally)`);
  }

  try {
    const client = createProviderClient(model, apiKey, { timeoutMs, maxRetries: 0, ...(options.fetch ? { fetch: options.fetch } : {}) });
    const page = await client.models.list();
    if (!page.data.some((m) => m.id === model.apiModelId)) {
      return fail("model_not_offered", `the provider does not list model "${model.apiModelId}" — check the model id in config`);
    }
    return { ...base, status: "ok", checkedAt: now() };
  } catch (err) {
    return describeProviderFailure(err, model, timeoutMs, fail);
  }
}

/**
 * Maps SDK errors to a reason and a sentence; never copies the provider's own text (it may echo the key), and
 * names the provider by its config id, never its URL: `/healthz?deep=1` needs no token and strict mode shows this
 * line to every caller (issue 20 §5).
 */
function describeProviderFailure(
  err: unknown,
  model: ResolvedModel,
  timeoutMs: number,
  fail: (reason: ValidationFailure, detail: string) => ValidationOutcome,
): ValidationOutcome {
  const variable = providerKeyVariable(model.providerId);
  if (err instanceof OpenAI.APIConnectionTimeoutError) {
    return fail("timeout", `no answer from the provider within ${timeoutMs} ms — check models.providers.${model.providerId}.baseUrl`);
  }
  if (err instanceof OpenAI.APIConnectionError) {
    return fail("unreachable", `cannot reach the provider — check models.providers.${model.providerId}.baseUrl and the network`);
  }
  if (err instanceof OpenAI.AuthenticationError || err instanceof OpenAI.PermissionDeniedError) {
    return fail("auth_rejected", `the provider rejected the API key (HTTP ${err.status}) — check ${variable}`);
  }
  if (err instanceof OpenAI.APIError && typeof err.status === "number") {
    return fail("provider_error", `GET /models answered HTTP ${err.status}`);
  }
  return fail("provider_error", "unexpected answer from the provider");
}

/**
 * Per-isolate validation state: one check at a time, a success remembered for
 * the isolate's life, a failure re-checked after `VALIDATION_RETRY_AFTER_MS`,
 * and exactly one log line per check.
 */
export class StartupValidator {
  #outcome: ValidationOutcome | undefined;
  #inFlight: Promise<ValidationOutcome> | undefined;
  readonly #now: () => number;
  readonly #options: ValidationOptions;

  constructor(options: ValidationOptions = {}) {
    this.#now = options.now ?? Date.now;
    this.#options = options;
  }

  /** The current outcome, re-checking when there is none yet or a failure has aged out. */
  async check(env: object, config: GatewayConfig, logger: Logger, deployment?: DeploymentOrigins): Promise<ValidationOutcome> {
    const known = this.#outcome;
    if (known && (known.status !== "failed" || this.#now() - known.checkedAt < VALIDATION_RETRY_AFTER_MS)) return known;
    if (!this.#inFlight) {
      const started = this.#now();
      this.#inFlight = validateDefaultModel(env, config, this.#options, deployment)
        .then((outcome) => {
          this.#outcome = outcome;
          logOutcome(logger, outcome, this.#now() - started);
          return outcome;
        })
        .finally(() => {
          this.#inFlight = undefined;
        });
    }
    return this.#inFlight;
  }

  /**
   * For routes that need the provider: resolves when they may proceed, throws
   * 503 `provider.unavailable` with the actionable line when `strict` fails.
   */
  async require(env: object, config: GatewayConfig, logger: Logger, deployment?: DeploymentOrigins): Promise<ValidationOutcome> {
    const outcome = await this.check(env, config, logger, deployment);
    if (outcome.status === "failed" && outcome.mode === "strict") {
      throw new GatewayError("provider.unavailable", outcome.message ?? "startup validation failed", { status: 503 });
    }
    return outcome;
  }
}

function logOutcome(logger: Logger, o: ValidationOutcome, latencyMs: number): void {
  const fields = {
    provider: o.provider,
    model: o.model,
    mode: o.mode,
    status: o.status,
    latency_ms: latencyMs,
    ...(o.reason ? { reason: o.reason } : {}),
    ...(o.message ? { message: o.message } : {}),
  };
  if (o.status !== "failed") logger.log("info", "startup.validation", fields);
  else logger.log(o.mode === "strict" ? "error" : "warn", "startup.validation", fields);
}

/** The validator of this isolate: its outcome is the isolate's provider readiness. */
export const isolateStartupValidator = new StartupValidator();

/**
 * The one way the gateway talks to a model provider: the official `openai`
 * SDK pointed at an OpenAI-compatible base URL. Retries and fallbacks are the
 * caller's decision (there is never a fallback to another provider, S1 §0.4).
 */
import OpenAI from "openai";
import type { ResolvedModel } from "../config/model-ref";

export interface ProviderClientOptions {
  /** Per-request timeout in milliseconds. */
  timeoutMs: number;
  /** SDK-level retries; 0 where the caller owns the retry policy. */
  maxRetries: number;
  /** The fetch to use; the runtime's by default (tests inject network failures here). */
  fetch?: typeof fetch;
}

/** Clients kept per isolate (building one costs milliseconds); keyed by everything that configures them. */
const clients = new Map<string, OpenAI>();
const MAX_CLIENTS = 32;

/**
 * A client for the model's provider. Local providers without a key send a placeholder the server ignores.
 * Clients are reused within the isolate (an injected `fetch` always gets a fresh one).
 */
export function createProviderClient(model: ResolvedModel, apiKey: string | undefined, options: ProviderClientOptions): OpenAI {
  const make = () =>
    new OpenAI({
      apiKey: apiKey ?? "local-provider-no-key",
      baseURL: model.baseUrl,
      timeout: options.timeoutMs,
      maxRetries: options.maxRetries,
      ...(options.fetch ? { fetch: options.fetch } : {}),
    });
  if (options.fetch) return make();
  const key = JSON.stringify([model.baseUrl, apiKey ?? null, options.timeoutMs, options.maxRetries]);
  let client = clients.get(key);
  if (!client) {
    if (clients.size >= MAX_CLIENTS) clients.delete(clients.keys().next().value as string);
    client = make();
    clients.set(key, client);
  }
  return client;
}

/**
 * The backend interface of S4 §7 — `chat(request)` and `streamChat(request,
 * signal)` — over the official `openai` SDK, for every `openai_compatible`
 * provider. Native tool calling uses legal wire names (mapped back here, in
 * one place). Provider failures become a `ProviderError` with a stable reason;
 * rate limits, 5xx, timeouts and dropped connections are retried a bounded
 * number of times with backoff; auth and request errors are not. There is
 * never a fallback to another provider or model (S1 §0.4).
 */
import OpenAI from "openai";
import type { ChatCompletionChunk, ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import type { CompletionUsage } from "openai/resources/completions";
import type { ResolvedModel } from "../config/model-ref";
import { GatewayError } from "../errors";
import { wireNameMap } from "../tools/wire-names";
import { createProviderClient } from "./client";

export interface ToolSpec {
  /** The gateway's tool name, e.g. `fs.read_text`. */
  name: string;
  description: string;
  /** JSON Schema of the arguments. */
  parameters: Record<string, unknown>;
}

export interface ChatRequest {
  model: ResolvedModel;
  apiKey: string | undefined;
  messages: ChatCompletionMessageParam[];
  /** Offered as native functions; only for models with `supportsTools: true`. */
  tools?: ToolSpec[];
}

export interface ToolCall {
  id: string;
  /** The gateway's tool name (mapped back from the wire name). */
  name: string;
  /** Parsed arguments, or the raw text when the model sent invalid JSON. */
  arguments: Record<string, unknown> | string;
}

export interface ChatResult {
  content: string;
  toolCalls: ToolCall[];
  finishReason: string;
  /**
   * As the provider reported it, once checked (issue 33: `acceptUsage`); null when it reported none or its counts
   * were refused. `cachedTokens`: `prompt_tokens_details.cached_tokens`, where reported. `totalTokens` is
   * prompt + completion, never the provider's own `total_tokens`.
   */
  usage: { promptTokens: number; completionTokens: number; totalTokens: number; cachedTokens?: number } | null;
  /** Issue 33: why the provider's usage block was refused (the call counts as unreported); absent when it was not. */
  usageRefused?: string;
  /** Requests made, retries included. */
  attempts: number;
}

export type ProviderFailure = "auth" | "rate_limited" | "server_error" | "timeout" | "unreachable" | "bad_request";

/** A provider call that failed; `message` is ours (the provider's text may echo the key). */
export class ProviderError extends GatewayError {
  readonly reason: ProviderFailure;
  readonly retryable: boolean;
  constructor(reason: ProviderFailure, message: string, retryable: boolean) {
    super("provider.unavailable", message, reason === "timeout" ? { status: 504 } : {});
    this.name = "ProviderError";
    this.reason = reason;
    this.retryable = retryable;
  }
}

export interface AdapterOptions {
  /** Total attempts including the first (bounded retries). */
  maxAttempts?: number;
  timeoutMs?: number;
  /** Delay before retry `attempt` (1-based); exponential with jitter by default. */
  backoffMs?: (attempt: number) => number;
  sleep?: (ms: number) => Promise<void>;
  fetch?: typeof fetch;
  /** Cancels the call (S4 §7 cancellation); an aborted call is never retried. */
  signal?: AbortSignal;
}

const defaultBackoff = (attempt: number) => Math.min(8_000, 250 * 2 ** (attempt - 1)) * (0.75 + Math.random() * 0.5);

/**
 * A provider that answered 200 without a completion (no choice at all, or a plain body to a streaming request): a
 * failed call, never an empty reply passed off as the model's answer. Not retried: the same request gets the same.
 */
function noCompletion(model: ResolvedModel): ProviderError {
  return new ProviderError("server_error", `the model ${model.ref} answered without a completion`, false);
}

/**
 * Maps an SDK error to a ProviderError; never copies the provider's own message. The message reaches API
 * callers (the run's output, its events, `/v1/chat/completions` errors), so it names the provider by its
 * config id inside the model ref (`moonshot:kimi-k1-128k`) and never by its base URL or host (issue 20 §5).
 */
export function classifyProviderError(err: unknown, model: ResolvedModel): ProviderError {
  if (err instanceof ProviderError) return err;
  const where = model.ref;
  if (err instanceof OpenAI.APIConnectionTimeoutError)
    return new ProviderError("timeout", `the model ${where} did not answer in time`, true);
  if (err instanceof OpenAI.APIUserAbortError) return new ProviderError("timeout", `the call to ${where} was cancelled`, false);
  if (err instanceof OpenAI.APIConnectionError) return new ProviderError("unreachable", `cannot reach ${where}`, true);
  if (err instanceof OpenAI.AuthenticationError || err instanceof OpenAI.PermissionDeniedError) {
    return new ProviderError("auth", `the provider rejected the API key for ${where} (HTTP ${err.status})`, false);
  }
  if (err instanceof OpenAI.RateLimitError) return new ProviderError("rate_limited", `the provider rate-limited ${where} (HTTP 429)`, true);
  if (err instanceof OpenAI.APIError && typeof err.status === "number") {
    if (err.status >= 500) return new ProviderError("server_error", `the provider failed for ${where} (HTTP ${err.status})`, true);
    return new ProviderError("bad_request", `the provider refused the request for ${where} (HTTP ${err.status})`, false);
  }
  return new ProviderError("unreachable", `unexpected failure calling ${where}`, false);
}

/** The client for one call (SDK retries off: this module owns them) and the tools under their wire names. */
function prepare(req: ChatRequest, o: AdapterOptions) {
  const client = createProviderClient(req.model, req.apiKey, {
    timeoutMs: o.timeoutMs ?? 60_000,
    maxRetries: 0,
    ...(o.fetch ? { fetch: o.fetch } : {}),
  });
  // Tools are offered natively only to models configured with supportsTools (the marker protocol serves the rest).
  const tools = req.model.supportsTools ? (req.tools ?? []) : [];
  const map = wireNameMap(tools.map((t) => t.name));
  const wire: ChatCompletionTool[] | undefined = tools.length
    ? tools.map((t) => ({ type: "function", function: { name: map.toWire(t.name), description: t.description, parameters: t.parameters } }))
    : undefined;
  return { client, map, wire };
}

function mapToolCall(id: string, wireName: string, rawArgs: string, fromWire: (w: string) => string | undefined): ToolCall {
  // A name that was not offered is passed on as the model wrote it (at most 128 characters): the policy gate
  // answers it with tool.not_found or policy.denied as a tool result, and the run goes on (S3 §1.3).
  const name = fromWire(wireName) ?? wireName.slice(0, 128);
  let args: Record<string, unknown> | string = rawArgs;
  try {
    const parsed = JSON.parse(rawArgs || "{}");
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) args = parsed as Record<string, unknown>;
  } catch {
    /* keep the raw text: the tool round reports tool.input_invalid */
  }
  return { id, name, arguments: args };
}

async function withRetries<T>(model: ResolvedModel, o: AdapterOptions, call: () => Promise<T>): Promise<{ value: T; attempts: number }> {
  const maxAttempts = Math.max(1, o.maxAttempts ?? 3);
  const sleep = o.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  for (let attempt = 1; ; attempt++) {
    try {
      return { value: await call(), attempts: attempt };
    } catch (err) {
      const failure = classifyProviderError(err, model);
      if (!failure.retryable || attempt >= maxAttempts || o.signal?.aborted) throw failure;
      await sleep((o.backoffMs ?? defaultBackoff)(attempt));
    }
  }
}

/** S4 §7 `chat(request) -> response`. */
export async function chat(req: ChatRequest, o: AdapterOptions = {}): Promise<ChatResult> {
  const { client, map, wire } = prepare(req, o);
  const { value: completion, attempts } = await withRetries(req.model, o, () =>
    client.chat.completions.create(
      {
        model: req.model.apiModelId,
        messages: req.messages,
        max_tokens: req.model.maxOutputTokens,
        ...(wire ? { tools: wire } : {}),
      },
      o.signal ? { signal: o.signal } : {},
    ),
  );
  const choice = completion.choices?.[0];
  if (!choice) throw noCompletion(req.model);
  const toolCalls = (choice.message.tool_calls ?? []).flatMap((t) =>
    t.type === "function" ? [mapToolCall(t.id, t.function.name, t.function.arguments, map.fromWire)] : [],
  );
  return {
    content: choice.message.content ?? "",
    toolCalls,
    finishReason: choice.finish_reason ?? "unknown",
    ...usageOf(completion.usage, req.model),
    attempts,
  };
}

type Usage = NonNullable<ChatResult["usage"]>;

/** The result's usage fields from the provider's block (issue 25 §2: the cached part where reported): checked, or refused. */
function usageOf(u: unknown, model: ResolvedModel): Pick<ChatResult, "usage" | "usageRefused"> {
  if (u === undefined || u === null) return { usage: null };
  const checked = acceptUsage(u, model);
  return "refused" in checked ? { usage: null, usageRefused: checked.refused } : { usage: checked.usage };
}

/** A token count a provider may report: a non-negative safe integer (not a string, a fraction, 1e300 or 2^53 + 1). */
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

/**
 * Issue 33 (D-085): a provider's usage block is believed only when its counts are non-negative safe integers, the
 * cached tokens at most the prompt's, and prompt + completion fit the model's context window (no call can process
 * more) — else it is refused, with the reason, and the call counts as unreported, so no number a provider made up
 * reaches a run, a D1 rollup or a token budget. `total_tokens` is not read: the total is prompt + completion.
 */
export function acceptUsage(u: unknown, model: ResolvedModel): { usage: Usage } | { refused: string } {
  const block = (typeof u === "object" && u !== null ? u : {}) as Partial<Record<keyof CompletionUsage, unknown>>;
  const { prompt_tokens: prompt, completion_tokens: completion } = block;
  if (!isCount(prompt)) return { refused: "prompt_tokens is not a non-negative safe integer" };
  if (!isCount(completion)) return { refused: "completion_tokens is not a non-negative safe integer" };
  const details = block.prompt_tokens_details;
  const cached = typeof details === "object" && details !== null ? (details as { cached_tokens?: unknown }).cached_tokens : undefined;
  if (cached !== undefined && cached !== null && !isCount(cached))
    return { refused: "prompt_tokens_details.cached_tokens is not a non-negative safe integer" };
  if (isCount(cached) && cached > prompt) return { refused: "prompt_tokens_details.cached_tokens exceed prompt_tokens" };
  if (prompt + completion > model.contextWindow)
    return { refused: `prompt_tokens + completion_tokens exceed the model's context window (${model.contextWindow})` };
  const usage = { promptTokens: prompt, completionTokens: completion, totalTokens: prompt + completion };
  return { usage: isCount(cached) ? { ...usage, cachedTokens: cached } : usage };
}

export type StreamEvent = { type: "delta"; content: string } | { type: "done"; result: ChatResult };

/** S4 §7 `stream_chat(request, cancel) -> async iterator of deltas`; the last event carries the whole result. */
export async function* streamChat(req: ChatRequest, signal: AbortSignal, o: AdapterOptions = {}): AsyncGenerator<StreamEvent> {
  if (!req.model.supportsStreaming)
    throw new ProviderError("bad_request", `${req.model.ref} does not support streaming (config supportsStreaming: false)`, false);
  const { client, map, wire } = prepare(req, o);
  // Retries apply to opening the stream; once deltas flow, a failure ends the call.
  const { value: stream, attempts } = await withRetries(req.model, o, () =>
    client.chat.completions.create(
      {
        model: req.model.apiModelId,
        messages: req.messages,
        max_tokens: req.model.maxOutputTokens,
        stream: true,
        stream_options: { include_usage: true },
        ...(wire ? { tools: wire } : {}),
      },
      { signal },
    ),
  );
  let content = "";
  let finishReason = "unknown";
  let usage: Pick<ChatResult, "usage" | "usageRefused"> = { usage: null };
  const calls = new Map<number, { id: string; name: string; args: string }>();
  let choices = 0;
  try {
    for await (const chunk of stream as AsyncIterable<ChatCompletionChunk>) {
      // The last usage block sent is the call's (some providers send a running count with every chunk).
      if (chunk.usage) usage = usageOf(chunk.usage, req.model);
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      choices++;
      if (choice.finish_reason) finishReason = choice.finish_reason;
      const piece = choice.delta.content;
      if (piece) {
        content += piece;
        yield { type: "delta", content: piece };
      }
      for (const t of choice.delta.tool_calls ?? []) {
        const call = calls.get(t.index) ?? { id: "", name: "", args: "" };
        call.id ||= t.id ?? "";
        call.name += t.function?.name ?? "";
        call.args += t.function?.arguments ?? "";
        calls.set(t.index, call);
      }
    }
  } catch (err) {
    throw classifyProviderError(err, req.model);
  }
  // A body that is no stream of chunks (a provider ignoring `stream: true`) reads as no chunk at all: not an empty answer.
  if (choices === 0) throw noCompletion(req.model);
  const toolCalls = [...calls.entries()].sort(([a], [b]) => a - b).map(([, c]) => mapToolCall(c.id, c.name, c.args, map.fromWire));
  yield { type: "done", result: { content, toolCalls, finishReason, ...usage, attempts } };
}

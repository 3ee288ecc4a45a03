/**
 * What the OpenAI-compatible routes send (docs/openai.md): `chat.completion` objects, `chat.completion.chunk`
 * events, the model list, and OpenAI's error shape `{"error":{"message","type","code"}}` with the gateway's code
 * in `code`. Pure builders, no I/O.
 */
import { z } from "@hono/zod-openapi";
import type { GatewayError } from "../errors";

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** OpenAI's own field, present when the provider reported cached prompt tokens (issue 25 §2). */
  prompt_tokens_details?: { cached_tokens: number };
  /** The gateway's extra field: the run's cost in USD (exact decimal string), when its model is priced (D-078). */
  cost_usd?: string;
}

/** Token usage from the provider's figures, summed over the run's model calls; cached tokens and cost where known. */
export function usageOf(u: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number; cost_usd?: string }): Usage {
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    ...(u.cached_tokens !== undefined ? { prompt_tokens_details: { cached_tokens: u.cached_tokens } } : {}),
    ...(u.cost_usd !== undefined ? { cost_usd: u.cost_usd } : {}),
  };
}

/** The completion id of a run: the run id stays traceable (`GET /v1/runs/{run_id}`, the audit log). */
export const completionId = (runId: string) => `chatcmpl-${runId}`;

export const ChatCompletion = z
  .object({
    id: z.string(),
    object: z.literal("chat.completion"),
    created: z.number().int(),
    model: z.string(),
    choices: z.array(
      z.object({
        index: z.number().int(),
        message: z.object({ role: z.literal("assistant"), content: z.string(), refusal: z.null() }),
        finish_reason: z.literal("stop"),
        logprobs: z.null(),
      }),
    ),
    usage: z.object({
      prompt_tokens: z.number().int(),
      completion_tokens: z.number().int(),
      total_tokens: z.number().int(),
      prompt_tokens_details: z
        .object({ cached_tokens: z.number().int() })
        .optional()
        .openapi({ description: "When the provider reported cached prompt tokens" }),
      cost_usd: z.string().optional().openapi({
        description: "Gateway extension: the run's cost in USD, an exact decimal string; absent when its model has no pricing",
      }),
    }),
    system_fingerprint: z.null(),
  })
  .openapi("OpenAIChatCompletion");
export type ChatCompletion = z.infer<typeof ChatCompletion>;

/** A whole answer. */
export function chatCompletion(o: { runId: string; model: string; created: number; content: string; usage: Usage }): ChatCompletion {
  return {
    id: completionId(o.runId),
    object: "chat.completion",
    created: o.created,
    model: o.model,
    choices: [{ index: 0, message: { role: "assistant", content: o.content, refusal: null }, finish_reason: "stop", logprobs: null }],
    usage: o.usage,
    system_fingerprint: null,
  };
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: { index: 0; delta: { role?: "assistant"; content?: string }; finish_reason: "stop" | null; logprobs: null }[];
  usage?: Usage;
  system_fingerprint: null;
}

/**
 * The chunks of a streamed answer, in order: the role (sent at once, before the run ends), the content, the
 * finish, and — when the client asked with `stream_options.include_usage` — a last chunk with no choices and the
 * usage. `data: [DONE]` follows them on the wire.
 */
export const chunks = {
  role: (o: { runId: string; model: string; created: number }): ChatCompletionChunk =>
    chunk(o, [{ delta: { role: "assistant", content: "" } }]),
  content: (o: { runId: string; model: string; created: number }, content: string): ChatCompletionChunk =>
    chunk(o, [{ delta: { content } }]),
  finish: (o: { runId: string; model: string; created: number }): ChatCompletionChunk => chunk(o, [{ delta: {}, finish_reason: "stop" }]),
  usage: (o: { runId: string; model: string; created: number }, usage: Usage): ChatCompletionChunk => ({ ...chunk(o, []), usage }),
};

function chunk(
  o: { runId: string; model: string; created: number },
  choices: { delta: ChatCompletionChunk["choices"][number]["delta"]; finish_reason?: "stop" }[],
): ChatCompletionChunk {
  return {
    id: completionId(o.runId),
    object: "chat.completion.chunk",
    created: o.created,
    model: o.model,
    choices: choices.map((c) => ({ index: 0, delta: c.delta, finish_reason: c.finish_reason ?? null, logprobs: null })),
    system_fingerprint: null,
  };
}

export const ModelList = z
  .object({
    object: z.literal("list"),
    data: z.array(z.object({ id: z.string(), object: z.literal("model"), created: z.number().int(), owned_by: z.string() })),
  })
  .openapi("OpenAIModelList");

/** `GET /v1/models`: every name a caller may put in `model`. `created` is 0: agents have no release date. */
export function modelList(ids: readonly string[]): z.infer<typeof ModelList> {
  return { object: "list", data: ids.map((id) => ({ id, object: "model" as const, created: 0, owned_by: "sophie-gateway" })) };
}

export const OpenAIErrorSchema = z
  .object({ error: z.object({ message: z.string(), type: z.string(), code: z.string() }) })
  .openapi("OpenAIError");

/** OpenAI's error `type` for a gateway error, by status (and `insufficient_quota` for a spent token budget). */
export function openAiErrorType(e: Pick<GatewayError, "code" | "status">): string {
  if (e.code === "over_budget") return "insufficient_quota";
  if (e.status === 401) return "authentication_error";
  if (e.status === 403) return "permission_error";
  if (e.status === 404) return "not_found_error";
  if (e.status === 429) return "rate_limit_error";
  if (e.status >= 500) return "server_error";
  return "invalid_request_error";
}

/** The OpenAI error envelope of a gateway error: the message, OpenAI's type, the gateway's code. */
export function openAiError(e: Pick<GatewayError, "code" | "status" | "message">): z.infer<typeof OpenAIErrorSchema> {
  return { error: { message: e.message, type: openAiErrorType(e), code: e.code } };
}

/** The paths that answer in OpenAI's shape (errors included), not the S3 envelope. */
export function isOpenAiPath(path: string): boolean {
  return path === "/v1/chat/completions" || path === "/v1/models" || path.startsWith("/v1/models/");
}

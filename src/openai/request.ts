/**
 * The OpenAI Chat Completions request, as the front door accepts it (docs/openai.md), and what it means for the
 * gateway: which agent (`model`), which conversation (`user`), and the one new input — the last user message,
 * since the gateway's own transcript is authoritative and the client's copy of the history is not trusted.
 *
 * Only this turn's messages (those after the last assistant message) are validated — the resent history is read
 * for nothing but where the last assistant message is (issue 23: a long conversation is not re-validated on
 * every turn). Pure: no I/O. Everything a client may not do is refused here with a GatewayError naming the field:
 * client-defined tools (the agent's tools are the gateway's), non-text content, several choices, JSON modes,
 * and — when the config says so — system messages. System text otherwise becomes labelled user content (L6);
 * it never reaches a hidden layer.
 */
import { z } from "@hono/zod-openapi";
import type { GatewayConfig } from "../config/schema";
import { GatewayError, invalidRequestFromZod } from "../errors";
import { KEY_PART } from "../sessions/keys";

/** The longest new input accepted (as `POST /v1/chat/messages`). */
export const MAX_INPUT_CHARS = 100_000;

const Role = z.enum(["system", "developer", "user", "assistant", "tool", "function"]);

/**
 * One message. History messages (everything but the new input) are read only for their role, so their other
 * fields (tool calls, refusals, annotations a client kept) are let through and ignored.
 */
export const ChatMessage = z
  .looseObject({
    role: Role,
    content: z.union([z.string(), z.array(z.looseObject({ type: z.string() })), z.null()]).optional(),
    name: z.string().max(256).optional(),
  })
  .openapi("OpenAIChatMessage");

/**
 * A message as the request schema checks it: an object, nothing more (readChatRequest validates this turn's
 * messages with `ChatMessage`; older ones are never read). The documentation shows `ChatMessage`.
 */
// biome-ignore lint/suspicious/noExplicitAny: zod-openapi's metadata type has no `$ref`, which it nonetheless emits
const ResentMessage = z.looseObject({}).openapi({ $ref: "#/components/schemas/OpenAIChatMessage" } as any);

/** Sampling and bookkeeping parameters a client may send; the agent's configuration decides, so they are ignored. */
export const IGNORED_PARAMETERS = [
  "temperature",
  "top_p",
  "max_tokens",
  "max_completion_tokens",
  "presence_penalty",
  "frequency_penalty",
  "stop",
  "seed",
  "logit_bias",
  "top_logprobs",
  "metadata",
  "store",
  "service_tier",
  "reasoning_effort",
  "verbosity",
  "prompt_cache_key",
  "safety_identifier",
  "parallel_tool_calls",
  "prediction",
] as const;

const ignored = Object.fromEntries(IGNORED_PARAMETERS.map((k) => [k, z.unknown().optional()])) as Record<
  (typeof IGNORED_PARAMETERS)[number],
  z.ZodOptional<z.ZodUnknown>
>;

/** The request body. Unknown fields are refused (each one named); the parameters above are accepted and ignored. */
export const ChatCompletionRequest = z
  .strictObject({
    model: z.string().min(1).max(128),
    messages: z.array(ResentMessage).min(1).max(10_000),
    user: z.string().max(256).optional(),
    stream: z.boolean().optional(),
    stream_options: z.strictObject({ include_usage: z.boolean().optional() }).nullable().optional(),
    n: z.number().int().optional(),
    logprobs: z.boolean().nullable().optional(),
    response_format: z.looseObject({ type: z.string() }).optional(),
    modalities: z.array(z.string()).nullable().optional(),
    // Refused when present (see readChatRequest): the agent's tools and modes are the gateway's.
    tools: z.unknown().optional(),
    tool_choice: z.unknown().optional(),
    functions: z.unknown().optional(),
    function_call: z.unknown().optional(),
    audio: z.unknown().optional(),
    web_search_options: z.unknown().optional(),
    ...ignored,
  })
  .openapi("OpenAIChatCompletionRequest");
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

/** What a request asks of the gateway. */
export interface ChatTurn {
  agentId: string;
  /** The model name as the client sent it (echoed in every answer). */
  model: string;
  /** The conversation's peer id (`user`), or null for an isolated run. */
  user: string | null;
  /** The new input: the last user message, with any new system text before it, labelled (as_user). */
  input: string;
  stream: boolean;
  includeUsage: boolean;
}

const invalid = (message: string) => new GatewayError("invalid.request", message);

/** The agent a model name addresses: `agent:<agent_id>`, or an alias from `openai.aliases`; null when neither. */
export function agentForModel(config: GatewayConfig, model: string): string | null {
  if (model.startsWith("agent:")) {
    const id = model.slice("agent:".length);
    return Object.hasOwn(config.agents, id) ? id : null;
  }
  const aliased = Object.hasOwn(config.openai.aliases, model) ? config.openai.aliases[model] : undefined;
  return aliased !== undefined && Object.hasOwn(config.agents, aliased) ? aliased : null;
}

/** The model names a caller may use: `agent:<id>` for every agent, then the aliases, each sorted. */
export function modelNames(config: GatewayConfig): { id: string; agentId: string }[] {
  const agents = Object.keys(config.agents)
    .sort()
    .map((id) => ({ id: `agent:${id}`, agentId: id }));
  const aliases = Object.entries(config.openai.aliases)
    .filter(([, agentId]) => Object.hasOwn(config.agents, agentId))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([id, agentId]) => ({ id, agentId }));
  return [...agents, ...aliases];
}

/** A message's text: a string, or text parts joined; any other part is refused, naming where it is. */
function textOf(content: z.infer<typeof ChatMessage>["content"], where: string): string {
  if (content === undefined || content === null) return "";
  if (typeof content === "string") return content;
  return content
    .map((part, j) => {
      if (part.type !== "text" || typeof part.text !== "string")
        throw invalid(`${where}.content[${j}]: only text content is accepted (got "${String(part.type).slice(0, 40)}")`);
      return part.text;
    })
    .join("");
}

/** Validates a parsed request against the contract and the config, and extracts the turn. */
export function readChatRequest(body: ChatCompletionRequest, config: GatewayConfig): ChatTurn {
  // Client-defined tools never enter the tool registry. Empty lists and "none"/"auto" choices ask for nothing.
  const asksForTools = (v: unknown) =>
    v !== undefined && v !== null && !(Array.isArray(v) && v.length === 0) && v !== "none" && v !== "auto";
  for (const field of ["tools", "functions", "tool_choice", "function_call"] as const) {
    if (asksForTools(body[field]))
      throw invalid(`${field}: client-defined tools are not accepted; the agent's tools are configured on the gateway`);
  }
  if (body.audio !== undefined && body.audio !== null) throw invalid("audio: only text is supported");
  if (body.web_search_options !== undefined)
    throw invalid("web_search_options: not supported; the agent's tools are configured on the gateway");
  if (body.modalities?.some((m) => m !== "text")) throw invalid('modalities: only ["text"] is supported');
  if (body.n !== undefined && body.n !== 1) throw invalid("n: only one choice (n = 1) is supported");
  if (body.logprobs === true) throw invalid("logprobs: not supported");
  if (body.response_format && body.response_format.type !== "text")
    throw invalid(`response_format: only {"type":"text"} is supported (got "${String(body.response_format.type).slice(0, 40)}")`);

  const agentId = agentForModel(config, body.model);
  if (agentId === null)
    throw new GatewayError(
      "resource.not_found",
      `the model "${body.model.slice(0, 128)}" does not exist; GET /v1/models lists the agents you can use`,
    );

  let user: string | null = null;
  if (body.user !== undefined && body.user !== "") {
    if (!KEY_PART.test(body.user)) throw invalid("user: 1-128 characters of letters, digits and + . _ @ = -");
    user = body.user;
  }

  const messages = body.messages;
  const lastIndex = messages.length - 1;
  // This turn's messages: after the last assistant message (the resent history before it is not read).
  let lastAssistant = -1;
  for (let i = lastIndex; i >= 0; i--) {
    if ((messages[i] as { role?: unknown }).role === "assistant") {
      lastAssistant = i;
      break;
    }
  }
  const turn = new Map<number, z.infer<typeof ChatMessage>>();
  for (let i = Math.min(lastAssistant + 1, lastIndex); i <= lastIndex; i++) turn.set(i, newMessage(body, i));
  const last = turn.get(lastIndex) as z.infer<typeof ChatMessage>;
  if (last.role !== "user") throw invalid(`messages[${lastIndex}]: the last message must be the user's new message (role "user")`);
  const text = textOf(last.content, `messages[${lastIndex}]`);
  if (text.trim() === "") throw invalid(`messages[${lastIndex}].content: the user message is empty`);

  // System text sent with this turn (after the last assistant message): the client's, so user content or refused.
  const system: string[] = [];
  for (let i = lastAssistant + 1; i < lastIndex; i++) {
    const m = turn.get(i) as z.infer<typeof ChatMessage>;
    if (m.role !== "system" && m.role !== "developer") continue;
    if (config.openai.systemMessages === "refuse")
      throw invalid(
        `messages[${i}]: ${m.role} messages are not accepted; this agent's instructions are configured on the gateway (openai.systemMessages is "refuse")`,
      );
    const t = textOf(m.content, `messages[${i}]`).trim();
    if (t !== "") system.push(t);
  }
  const input = system.length > 0 ? `${clientInstructions(system)}\n\n${text}` : text;
  if (input.length > MAX_INPUT_CHARS) throw invalid(`messages: the new input is longer than ${MAX_INPUT_CHARS} characters`);

  return {
    agentId,
    model: body.model,
    user,
    input,
    stream: body.stream === true,
    includeUsage: body.stream === true && body.stream_options?.include_usage === true,
  };
}

/** Message `i`, validated as `ChatMessage`; a fault is refused as the request schema would (`messages[i].…`). */
function newMessage(body: ChatCompletionRequest, i: number): z.infer<typeof ChatMessage> {
  const parsed = ChatMessage.safeParse(body.messages[i]);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((issue) => ({ ...issue, path: ["messages", i, ...issue.path] }));
  throw invalidRequestFromZod(new z.ZodError(issues), "json", body);
}

/** The label system text carries into the user input (openai.systemMessages = as_user). */
export function clientInstructions(system: readonly string[]): string {
  return `[Instructions sent by the client application, as part of this user message]\n${system.join("\n\n")}\n[End of the client's instructions]`;
}

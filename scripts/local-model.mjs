#!/usr/bin/env node
// The offline model: a tiny OpenAI-compatible Chat Completions server that
// `npm start` runs beside the gateway, so the whole gateway (tool rounds, the
// S4 §3 marker protocol, NOTES blocks, the failure loop, the approval of a
// side-effect tool call) can be tried with no account, no key and no network.
// It follows a fixed script instead of thinking (docs/local-model.md has the
// table): the same request always gets the same response, byte for byte — no
// randomness, and `created` is always 0.
//
// Models: `sophie-local` (native tool calling when the request offers `tools`)
// and `sophie-local-markers` (the same script; the gateway offers it no tools,
// so tool calls come as a <<<TOOL_CALLS_JSON>>> block in the content).
//
// Run directly it listens on 127.0.0.1:$SOPHIE_LOCAL_MODEL_PORT (default 8790);
// tests import createLocalModelServer() and listen on port 0. No dependencies.
import { createHash } from "node:crypto";
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";

export const LOCAL_MODELS = ["sophie-local", "sophie-local-markers"];
export const DEFAULT_PORT = 8790;

const NOTES_BEGIN = "<<<NOTES_JSON>>>";
const NOTES_END = "<<<END_NOTES_JSON>>>";
const TOOL_CALLS_BEGIN = "<<<TOOL_CALLS_JSON>>>";
const TOOL_CALLS_END = "<<<END_TOOL_CALLS_JSON>>>";
/** The head of an S4 §3 success result (keys in the spec's order), for results cut short by the gateway's caps. */
const TRUNCATED_OK_RESULT = /^\{"id":"(?:[^"\\]|\\.)*","tool":"([^"\\]+)","ok":true,"output":/;
/** What "write a file" writes: always the same file and text; `overwrite` so that asking twice succeeds twice. */
export const WRITE_ARGS = { path: "notes/browser-test.txt", text: "written by the offline model", overwrite: true };
/**
 * What "environment variable" asks for (S5 `request_env_variables`, offered in setup sessions): always the same
 * one secret key, so the dashboard's env view has a request to answer (docs/local-model.md).
 */
export const ENV_REQUEST_ARGS = {
  keys: [{ key: "DEMO_API_KEY", type: "secret", required: true, description: "the demo service's API key" }],
};
/** Request bodies larger than this are refused (a local toy server; the gateway's contexts are far smaller). */
const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** The text of a message's content: a string, OpenAI content parts (their text joined), or "" for null. */
function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((part) => (typeof part?.text === "string" ? part.text : "")).join("");
  return "";
}

/**
 * What the user actually typed: the last user message without the context
 * blocks the gateway puts before it inside L6 (`=== RETRIEVED_MEMORY ===` …
 * `=== END_RETRIEVED_MEMORY ===`), whose words must not steer the script.
 */
function userWords(message) {
  return textOf(message?.content)
    .replace(/^=== ([A-Z_]+) ===\n[\s\S]*?\n=== END_\1 ===$/gm, "")
    .trim();
}

/** At most `max` characters, marked with "…" when cut. */
function clip(text, max) {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/** The token estimate used for `usage`: a quarter of the characters, rounded up. */
function estimateTokens(chars) {
  return Math.ceil(chars / 4);
}

/** The wire name the gateway gives a tool: OpenAI function names cannot contain dots. */
function wireName(tool) {
  return tool.replaceAll(".", "__");
}

/** Finds the arguments of an earlier call with this id (native tool_calls or a marker block), if the conversation has it. */
function argsOfEarlierCall(messages, id) {
  for (const m of messages) {
    if (m?.role !== "assistant") continue;
    for (const call of Array.isArray(m.tool_calls) ? m.tool_calls : []) {
      if (call?.id !== id) continue;
      try {
        return JSON.parse(call.function?.arguments ?? "");
      } catch {
        return undefined;
      }
    }
    const text = textOf(m.content);
    const start = text.indexOf(TOOL_CALLS_BEGIN);
    const end = text.indexOf(TOOL_CALLS_END, start);
    if (start < 0 || end < 0) continue;
    try {
      const calls = JSON.parse(text.slice(start + TOOL_CALLS_BEGIN.length, end));
      const hit = Array.isArray(calls) ? calls.find((c) => c?.id === id) : undefined;
      if (hit && typeof hit.args === "object" && hit.args !== null) return hit.args;
    } catch {
      /* not our block; keep looking */
    }
  }
  return undefined;
}

/**
 * The script: what the offline model does with a conversation.
 * Returns `{ text }` for a plain reply or `{ tool, args }` for a tool call.
 */
export function decide(messages) {
  const said = userWords(messages.findLast((m) => m?.role === "user"));
  const lower = said.toLowerCase();
  const last = messages.at(-1);

  if (last?.role === "tool") {
    const content = textOf(last.content);
    let result;
    try {
      result = JSON.parse(content);
    } catch {
      // The gateway caps a large result's text ("…" at the end), which cuts the JSON: read its head instead.
      const head = TRUNCATED_OK_RESULT.exec(content);
      if (head) return { text: `The tool ${head[1]} worked. Here is what it returned: ${clip(content.slice(head[0].length), 400)}` };
    }
    if (typeof result !== "object" || result === null || typeof result.tool !== "string")
      return { text: `The tool answered, but not with the JSON result I expected: ${clip(content, 200)}` };
    if (result.ok === true)
      return { text: `The tool ${result.tool} worked. Here is what it returned: ${clip(JSON.stringify(result.output ?? null), 400)}` };
    if (lower.includes("fail")) {
      const args = argsOfEarlierCall(messages, result.id) ?? (result.tool === "fs.read_text" ? { path: "does-not-exist.txt" } : {});
      return { tool: result.tool, args };
    }
    const why = typeof result.error?.message === "string" ? result.error.message : "no reason given";
    return { text: `The tool ${result.tool} failed: ${why}` };
  }
  // A side effect (fs.write_text is `side_effect`, so the gateway asks a human first): the dashboard's approval flow.
  if (lower.includes("write a file")) return { tool: "fs.write_text", args: WRITE_ARGS };
  // A setup session's request for values a person must supply: the dashboard's env view (issue 21 §2).
  if (lower.includes("environment variable")) return { tool: "request_env_variables", args: ENV_REQUEST_ARGS };
  if (lower.includes("list files") || lower.includes("tool")) return { tool: "fs.list_dir", args: { path: "." } };
  if (lower.includes("fail")) return { tool: "fs.read_text", args: { path: "does-not-exist.txt" } };
  if (lower.includes("remember") || lower.includes("note")) {
    const notes = { add_decisions: [said.slice(0, 200)], set_episode_summary: "The user asked me to remember something." };
    return { text: `Noted. I'll keep that in mind.\n${NOTES_BEGIN}\n${JSON.stringify(notes)}\n${NOTES_END}` };
  }
  return {
    text: `Hello from the offline model (sophie-local). You said: "${said.slice(0, 200)}". Try: "list files", "remember …", or "fail".`,
  };
}

/**
 * The assistant message for a request: the script's decision expressed as native
 * `tool_calls` (when the request offers tools) or as an S4 §3 marker block (when it offers none).
 */
export function reply(body) {
  const messages = body.messages;
  const decision = decide(messages);
  if (decision.text !== undefined) return { content: decision.text, toolCalls: null };

  const round = messages.filter((m) => m?.role === "tool").length + 1;
  const offered = Array.isArray(body.tools) ? body.tools.map((t) => t?.function?.name ?? t?.name).filter((n) => typeof n === "string") : [];
  if (offered.length === 0) {
    const block = JSON.stringify([{ id: `t${round}`, tool: decision.tool, args: decision.args }]);
    return { content: `I'll use a tool for that.\n${TOOL_CALLS_BEGIN}\n${block}\n${TOOL_CALLS_END}`, toolCalls: null };
  }
  const name = wireName(decision.tool);
  if (!offered.includes(name)) return { content: `I would use ${decision.tool}, but it is not enabled for this agent.`, toolCalls: null };
  return {
    content: null,
    toolCalls: [{ id: `call_${round}`, type: "function", function: { name, arguments: JSON.stringify(decision.args) } }],
  };
}

/** An OpenAI-style error body. */
function errorBody(message, type, code = null) {
  return { error: { message, type, param: null, code } };
}

function sendJson(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** Splits text into word-sized pieces (each word with the whitespace after it) that join back to the text. */
function pieces(text) {
  return text.match(/\s*\S+\s*/g) ?? (text ? [text] : []);
}

/** Answers one chat completions request body (already parsed) on `res`. */
function completeChat(res, body, rawBody) {
  if (typeof body !== "object" || body === null || Array.isArray(body))
    return sendJson(res, 400, errorBody("The request body must be a JSON object.", "invalid_request_error"));
  if (typeof body.model !== "string")
    return sendJson(res, 400, errorBody("you must provide a model parameter", "invalid_request_error", "missing_required_parameter"));
  if (!LOCAL_MODELS.includes(body.model))
    return sendJson(
      res,
      404,
      errorBody(
        `The model \`${body.model}\` does not exist. This server offers: ${LOCAL_MODELS.join(", ")}.`,
        "invalid_request_error",
        "model_not_found",
      ),
    );
  if (!Array.isArray(body.messages) || body.messages.length === 0)
    return sendJson(res, 400, errorBody("messages must be a non-empty array.", "invalid_request_error", "invalid_value"));

  const { content, toolCalls } = reply(body);
  const maxTokens = body.max_completion_tokens ?? body.max_tokens;
  let text = content;
  let finishReason = toolCalls ? "tool_calls" : "stop";
  // Like a real model, a plain reply longer than max_tokens is cut and says so.
  if (text !== null && Number.isInteger(maxTokens) && maxTokens > 0 && estimateTokens(text.length) > maxTokens) {
    text = text.slice(0, maxTokens * 4);
    finishReason = "length";
  }

  const promptChars = body.messages.reduce((n, m) => n + textOf(m?.content).length, 0);
  const replyChars = (text ?? "").length + (toolCalls ?? []).reduce((n, c) => n + c.function.name.length + c.function.arguments.length, 0);
  const usage = {
    prompt_tokens: estimateTokens(promptChars),
    completion_tokens: estimateTokens(replyChars),
    total_tokens: estimateTokens(promptChars) + estimateTokens(replyChars),
  };
  const id = `chatcmpl-local-${createHash("sha256").update(rawBody).digest("hex").slice(0, 16)}`;
  const base = { id, created: 0, model: body.model, system_fingerprint: "sophie-local" };

  if (body.stream !== true) {
    const message = { role: "assistant", content: text, refusal: null };
    if (toolCalls) message.tool_calls = toolCalls;
    return sendJson(res, 200, {
      ...base,
      object: "chat.completion",
      choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason }],
      usage,
    });
  }

  const chunk = (choices, extra = {}) => `data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices, ...extra })}\n\n`;
  const delta = (d, finish = null) => chunk([{ index: 0, delta: d, logprobs: null, finish_reason: finish }]);
  let out = delta({ role: "assistant" });
  for (const piece of pieces(text ?? "")) out += delta({ content: piece });
  if (toolCalls)
    out += delta({
      tool_calls: toolCalls.map((c, index) => ({
        index,
        id: c.id,
        type: "function",
        function: { name: c.function.name, arguments: c.function.arguments },
      })),
    });
  out += delta({}, finishReason);
  if (body.stream_options?.include_usage === true) out += chunk([], { usage });
  out += "data: [DONE]\n\n";
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  res.end(out);
}

/** The offline model as a node:http server (not listening yet). */
export function createLocalModelServer() {
  return createServer(async (req, res) => {
    const path = new URL(req.url ?? "/", "http://localhost").pathname.replace(/\/+$/, "");
    if (req.method === "GET" && path === "/v1/models") {
      return sendJson(res, 200, {
        object: "list",
        data: LOCAL_MODELS.map((id) => ({ id, object: "model", created: 0, owned_by: "sophie" })),
      });
    }
    if (req.method !== "POST" || path !== "/v1/chat/completions") {
      req.resume();
      return sendJson(res, 404, errorBody(`Unknown request URL: ${req.method} ${path || "/"}.`, "invalid_request_error", "unknown_url"));
    }
    const chunks = [];
    let size = 0;
    for await (const c of req) {
      size += c.length;
      if (size > MAX_BODY_BYTES) {
        res.setHeader("connection", "close");
        return sendJson(res, 413, errorBody(`Request bodies are limited to ${MAX_BODY_BYTES} bytes.`, "invalid_request_error"));
      }
      chunks.push(c);
    }
    const raw = Buffer.concat(chunks);
    let body;
    try {
      body = JSON.parse(raw.toString("utf8"));
    } catch (err) {
      return sendJson(res, 400, errorBody(`The request body is not valid JSON: ${err.message}`, "invalid_request_error"));
    }
    completeChat(res, body, raw);
  });
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const port = Number(process.env.SOPHIE_LOCAL_MODEL_PORT ?? DEFAULT_PORT);
  const server = createLocalModelServer();
  server.on("error", (err) => {
    console.error(
      `local-model: cannot listen on 127.0.0.1:${port}: ${err.code === "EADDRINUSE" ? "the port is in use (set SOPHIE_LOCAL_MODEL_PORT)" : err.message}`,
    );
    process.exit(1);
  });
  server.listen(port, "127.0.0.1", () => {
    console.log(`local-model: offline model (${LOCAL_MODELS.join(", ")}) on http://127.0.0.1:${port}/v1`);
  });
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => process.exit(0));
}

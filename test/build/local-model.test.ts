/**
 * The offline model (scripts/local-model.mjs) that `npm start` runs beside the
 * gateway: an OpenAI-compatible Chat Completions server with a fixed script,
 * driven here through the official `openai` SDK, as the gateway drives it.
 * Runs in Node on port 0.
 */
import type { AddressInfo } from "node:net";
import OpenAI from "openai";
import type {
  ChatCompletionChunk,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionMessageParam,
} from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLocalModelServer } from "../../scripts/local-model.mjs";

const server = createLocalModelServer();
let baseURL = "";
let client: OpenAI;

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseURL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

/** The tools the gateway offers an agent allowed fs.list_dir and fs.read_text, under their wire names. */
const TOOLS = ["fs__list_dir", "fs__read_text"].map((name) => ({
  type: "function" as const,
  function: { name, description: name, parameters: { type: "object", properties: { path: { type: "string" } } } },
}));

const SYSTEM: ChatCompletionMessageParam = { role: "system", content: "You are Sophie." };

/** The S4 §3 tool-result content. */
function result(id: string, tool: string, ok: boolean, output: unknown, error: { code: string; message: string } | null = null): string {
  return JSON.stringify({ id, tool, ok, output: ok ? output : null, error });
}

async function complete(body: Omit<ChatCompletionCreateParamsNonStreaming, "model"> & { model?: string }) {
  return client.chat.completions.create({ model: "sophie-local", ...body });
}

/** Streams a request and returns every chunk. */
async function streamChunks(body: Omit<ChatCompletionCreateParamsNonStreaming, "model"> & { model?: string }) {
  const stream = await client.chat.completions.create({
    model: "sophie-local",
    ...body,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks: ChatCompletionChunk[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

const HELLO = 'Hello from the offline model (sophie-local). You said: "Hi there". Try: "list files", "remember …", or "fail".';

describe("local model: plain replies", () => {
  it("answers an ordinary message with the fixed greeting quoting it, as a chat.completion with usage", async () => {
    const res = await complete({ messages: [SYSTEM, { role: "user", content: "Hi there" }] });
    expect(res.object).toBe("chat.completion");
    expect(res.id).toMatch(/^chatcmpl-local-[0-9a-f]{16}$/);
    expect(res.created).toBe(0);
    expect(res.model).toBe("sophie-local");
    expect(res.choices).toHaveLength(1);
    expect(res.choices[0]?.message.role).toBe("assistant");
    expect(res.choices[0]?.message.content).toBe(HELLO);
    expect(res.choices[0]?.message.tool_calls).toBeUndefined();
    expect(res.choices[0]?.finish_reason).toBe("stop");
    // ceil((15 + 8) / 4) = 6 prompt tokens; ceil(110 / 4) = 28 completion tokens.
    expect(HELLO.length).toBe(110);
    expect(res.usage).toEqual({ prompt_tokens: 6, completion_tokens: 28, total_tokens: 34 });
  });

  it("is deterministic: the same request gets the identical response, id included", async () => {
    const body = { messages: [{ role: "user" as const, content: "same question" }] };
    const a = await complete(body);
    const b = await complete(body);
    expect(b).toEqual(a);
    const other = await complete({ messages: [{ role: "user", content: "another question" }] });
    expect(other.id).not.toBe(a.id);
  });

  it("quotes at most 200 characters of the user's message", async () => {
    const res = await complete({ messages: [{ role: "user", content: "x".repeat(300) }] });
    expect(res.choices[0]?.message.content).toBe(
      `Hello from the offline model (sophie-local). You said: "${"x".repeat(200)}". Try: "list files", "remember …", or "fail".`,
    );
  });

  it("ignores the gateway's L6 context blocks: only the user's own words steer the script", async () => {
    const content = "=== RETRIEVED_MEMORY ===\nremember: the tool failed once\n=== END_RETRIEVED_MEMORY ===\n\nHi there";
    const res = await complete({ messages: [{ role: "user", content }], tools: TOOLS });
    expect(res.choices[0]?.message.content).toBe(HELLO);
  });

  it("streams the same reply word by word: role first, then content deltas that join to the JSON reply, then stop and usage", async () => {
    const messages: ChatCompletionMessageParam[] = [SYSTEM, { role: "user", content: "Hi there" }];
    const json = await complete({ messages });
    const chunks = await streamChunks({ messages });
    // One id per response (the request differs from the JSON one by `stream`, so the id does too).
    expect(chunks.every((c) => c.object === "chat.completion.chunk" && c.id === chunks[0]?.id && c.created === 0)).toBe(true);
    expect(chunks[0]?.id).toMatch(/^chatcmpl-local-[0-9a-f]{16}$/);
    expect(chunks[0]?.choices).toEqual([{ index: 0, delta: { role: "assistant" }, logprobs: null, finish_reason: null }]);
    const deltas = chunks.slice(1, -2).map((c) => c.choices[0]?.delta.content);
    expect(deltas.slice(0, 4)).toEqual(["Hello ", "from ", "the ", "offline "]);
    expect(deltas.join("")).toBe(json.choices[0]?.message.content);
    expect(chunks.at(-2)?.choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }]);
    // With stream_options.include_usage the last chunk has no choices and the same usage as the JSON reply.
    expect(chunks.at(-1)?.choices).toEqual([]);
    expect(chunks.at(-1)?.usage).toEqual(json.usage);
    expect(json.usage).toEqual({ prompt_tokens: 6, completion_tokens: 28, total_tokens: 34 });
  });

  it("sends no usage chunk when the stream does not ask for it", async () => {
    const stream = await client.chat.completions.create({
      model: "sophie-local",
      messages: [{ role: "user", content: "Hi" }],
      stream: true,
    });
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).toBe("stop");
    expect(chunks.some((c) => c.usage)).toBe(false);
  });

  it("cuts a reply longer than max_tokens to 4 characters a token, with finish_reason length", async () => {
    const res = await complete({ messages: [{ role: "user", content: "Hi there" }], max_tokens: 5 });
    expect(res.choices[0]?.message.content).toBe("Hello from the offli");
    expect(res.choices[0]?.finish_reason).toBe("length");
    expect(res.usage?.completion_tokens).toBe(5);
  });

  it('answers "remember …" with a short reply and an S4 §2 NOTES block recording the decision', async () => {
    const res = await complete({ messages: [{ role: "user", content: "  Please remember that I prefer tea.  " }], tools: TOOLS });
    expect(res.choices[0]?.message.content).toBe(
      "Noted. I'll keep that in mind.\n<<<NOTES_JSON>>>\n" +
        '{"add_decisions":["Please remember that I prefer tea."],"set_episode_summary":"The user asked me to remember something."}' +
        "\n<<<END_NOTES_JSON>>>",
    );
    expect(res.choices[0]?.finish_reason).toBe("stop");
  });

  it('treats "note" like "remember"', async () => {
    const res = await complete({ messages: [{ role: "user", content: "Note: the deploy is on Friday" }] });
    expect(res.choices[0]?.message.content).toContain('{"add_decisions":["Note: the deploy is on Friday"],');
  });
});

describe("local model: native tool calls (the request offers tools)", () => {
  it('"list files" calls fs.list_dir under its wire name fs__list_dir with {"path":"."}', async () => {
    const res = await complete({ messages: [SYSTEM, { role: "user", content: "Please LIST FILES" }], tools: TOOLS });
    expect(res.choices[0]?.message.content).toBeNull();
    expect(res.choices[0]?.message.tool_calls).toEqual([
      { id: "call_1", type: "function", function: { name: "fs__list_dir", arguments: '{"path":"."}' } },
    ]);
    expect(res.choices[0]?.finish_reason).toBe("tool_calls");
    // Completion tokens count the call: ceil(("fs__list_dir" + '{"path":"."}').length / 4) = ceil(24 / 4).
    expect(res.usage?.completion_tokens).toBe(6);
  });

  it('"tool" also calls fs.list_dir', async () => {
    const res = await complete({ messages: [{ role: "user", content: "use a tool" }], tools: TOOLS });
    expect(res.choices[0]?.message.tool_calls?.[0]).toMatchObject({ function: { name: "fs__list_dir" } });
  });

  it('"write a file" calls the side-effect tool fs.write_text with fixed arguments (the dashboard\'s approval flow)', async () => {
    const tools = [
      ...TOOLS,
      { type: "function" as const, function: { name: "fs__write_text", description: "fs.write_text", parameters: {} } },
    ];
    const res = await complete({ messages: [SYSTEM, { role: "user", content: "Please WRITE A FILE for me" }], tools });
    expect(res.choices[0]?.message.content).toBeNull();
    expect(res.choices[0]?.message.tool_calls).toEqual([
      {
        id: "call_1",
        type: "function",
        function: {
          name: "fs__write_text",
          arguments: '{"path":"notes/browser-test.txt","text":"written by the offline model","overwrite":true}',
        },
      },
    ]);
    expect(res.choices[0]?.finish_reason).toBe("tool_calls");
    // Once the gateway ran it (after the approval), the result is summarised like any success.
    const done = await complete({
      tools,
      messages: [
        { role: "user", content: "write a file" },
        { role: "assistant", content: null, tool_calls: res.choices[0]?.message.tool_calls ?? [] },
        {
          role: "tool",
          tool_call_id: "call_1",
          content: result("call_1", "fs.write_text", true, { path: "notes/browser-test.txt", bytes: 28, created: true }),
        },
      ],
    });
    expect(done.choices[0]?.message.content).toBe(
      'The tool fs.write_text worked. Here is what it returned: {"path":"notes/browser-test.txt","bytes":28,"created":true}',
    );
  });

  it('"write a file" is not called when the agent is not offered fs.write_text', async () => {
    const res = await complete({ messages: [{ role: "user", content: "write a file" }], tools: TOOLS });
    expect(res.choices[0]?.message.content).toBe("I would use fs.write_text, but it is not enabled for this agent.");
  });

  it('"environment variable" calls request_env_variables for the one secret DEMO_API_KEY (a setup session\'s request)', async () => {
    const tools = [
      ...TOOLS,
      { type: "function" as const, function: { name: "request_env_variables", description: "request", parameters: {} } },
    ];
    const res = await complete({ messages: [SYSTEM, { role: "user", content: "Ask me for an Environment Variable" }], tools });
    expect(res.choices[0]?.message.tool_calls).toEqual([
      {
        id: "call_1",
        type: "function",
        function: {
          name: "request_env_variables",
          arguments: '{"keys":[{"key":"DEMO_API_KEY","type":"secret","required":true,"description":"the demo service\'s API key"}]}',
        },
      },
    ]);
    // Outside setup sessions the gateway does not offer it, and the model says so.
    const plain = await complete({ messages: [{ role: "user", content: "an environment variable please" }], tools: TOOLS });
    expect(plain.choices[0]?.message.content).toBe("I would use request_env_variables, but it is not enabled for this agent.");
  });

  it('"fail" calls fs.read_text on a file that does not exist', async () => {
    const res = await complete({ messages: [{ role: "user", content: "show me a failure" }], tools: TOOLS });
    expect(res.choices[0]?.message.tool_calls).toEqual([
      { id: "call_1", type: "function", function: { name: "fs__read_text", arguments: '{"path":"does-not-exist.txt"}' } },
    ]);
  });

  it("streams a tool call as one tool_calls delta, then finish_reason tool_calls", async () => {
    const chunks = await streamChunks({ messages: [{ role: "user", content: "list files" }], tools: TOOLS });
    expect(chunks.map((c) => c.choices[0]?.delta ?? "usage")).toEqual([
      { role: "assistant" },
      { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "fs__list_dir", arguments: '{"path":"."}' } }] },
      {},
      "usage",
    ]);
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("tool_calls");
    expect(chunks.at(-1)?.usage).toEqual({ prompt_tokens: 3, completion_tokens: 6, total_tokens: 9 });
  });

  it("does not call a tool the request does not offer, and says so", async () => {
    const res = await complete({ messages: [{ role: "user", content: "list files" }], tools: TOOLS.slice(1) });
    expect(res.choices[0]?.message.content).toBe("I would use fs.list_dir, but it is not enabled for this agent.");
    expect(res.choices[0]?.message.tool_calls).toBeUndefined();
    expect(res.choices[0]?.finish_reason).toBe("stop");
  });
});

describe("local model: marker tool calls (S4 §3; no tools offered)", () => {
  it("sophie-local-markers asks for fs.list_dir with a TOOL_CALLS_JSON block in the content", async () => {
    const res = await complete({ model: "sophie-local-markers", messages: [{ role: "user", content: "list files" }] });
    expect(res.model).toBe("sophie-local-markers");
    expect(res.choices[0]?.message.content).toBe(
      'I\'ll use a tool for that.\n<<<TOOL_CALLS_JSON>>>\n[{"id":"t1","tool":"fs.list_dir","args":{"path":"."}}]\n<<<END_TOOL_CALLS_JSON>>>',
    );
    expect(res.choices[0]?.message.tool_calls).toBeUndefined();
    expect(res.choices[0]?.finish_reason).toBe("stop");
  });

  it('"write a file" as a marker block', async () => {
    const res = await complete({ model: "sophie-local-markers", messages: [{ role: "user", content: "write a file" }] });
    expect(res.choices[0]?.message.content).toBe(
      'I\'ll use a tool for that.\n<<<TOOL_CALLS_JSON>>>\n[{"id":"t1","tool":"fs.write_text","args":{"path":"notes/browser-test.txt","text":"written by the offline model","overwrite":true}}]\n<<<END_TOOL_CALLS_JSON>>>',
    );
  });

  it("sophie-local uses markers too when the gateway offers it no tools", async () => {
    const res = await complete({ messages: [{ role: "user", content: "fail please" }] });
    expect(res.choices[0]?.message.content).toBe(
      'I\'ll use a tool for that.\n<<<TOOL_CALLS_JSON>>>\n[{"id":"t1","tool":"fs.read_text","args":{"path":"does-not-exist.txt"}}]\n<<<END_TOOL_CALLS_JSON>>>',
    );
  });

  it("streamed, the marker block arrives as content deltas that join to the JSON reply", async () => {
    const body = { model: "sophie-local-markers", messages: [{ role: "user" as const, content: "list files" }] };
    const json = await complete(body);
    const chunks = await streamChunks(body);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toBe(json.choices[0]?.message.content);
  });
});

describe("local model: answers to tool rounds", () => {
  const listCall = { id: "call_1", type: "function" as const, function: { name: "fs__list_dir", arguments: '{"path":"."}' } };
  const readCall = (id: string) => ({
    id,
    type: "function" as const,
    function: { name: "fs__read_text", arguments: '{"path":"does-not-exist.txt"}' },
  });
  const notFound = { code: "tool.input_invalid", message: "no such file: does-not-exist.txt" };

  it("summarises a successful result in plain text", async () => {
    const res = await complete({
      tools: TOOLS,
      messages: [
        { role: "user", content: "list files" },
        { role: "assistant", content: null, tool_calls: [listCall] },
        { role: "tool", tool_call_id: "call_1", content: result("call_1", "fs.list_dir", true, { entries: ["a.txt", "notes/"] }) },
      ],
    });
    expect(res.choices[0]?.message.content).toBe('The tool fs.list_dir worked. Here is what it returned: {"entries":["a.txt","notes/"]}');
    expect(res.choices[0]?.finish_reason).toBe("stop");
  });

  it("truncates the returned output to 400 characters", async () => {
    const res = await complete({
      tools: TOOLS,
      messages: [
        { role: "user", content: "list files" },
        { role: "assistant", content: null, tool_calls: [listCall] },
        { role: "tool", tool_call_id: "call_1", content: result("call_1", "fs.list_dir", true, { text: "y".repeat(1000) }) },
      ],
    });
    expect(res.choices[0]?.message.content).toBe(
      `The tool fs.list_dir worked. Here is what it returned: ${`{"text":"${"y".repeat(1000)}`.slice(0, 400)}…`,
    );
  });

  it("still summarises a success whose JSON the gateway's caps cut short (ending in …)", async () => {
    const full = result("call_1", "fs.list_dir", true, { entries: Array.from({ length: 200 }, (_, i) => `file-${i}.txt`) });
    const res = await complete({
      tools: TOOLS,
      messages: [
        { role: "user", content: "list files" },
        { role: "assistant", content: null, tool_calls: [listCall] },
        { role: "tool", tool_call_id: "call_1", content: `${full.slice(0, 1519)}…` },
      ],
    });
    const output = full.slice(full.indexOf('"output":') + '"output":'.length);
    expect(res.choices[0]?.message.content).toBe(`The tool fs.list_dir worked. Here is what it returned: ${output.slice(0, 400)}…`);
  });

  it("reports a failed result in plain text when the user did not ask for failures", async () => {
    const res = await complete({
      tools: TOOLS,
      messages: [
        { role: "user", content: "use a tool" },
        { role: "assistant", content: null, tool_calls: [listCall] },
        {
          role: "tool",
          tool_call_id: "call_1",
          content: result("call_1", "fs.list_dir", false, null, { code: "timeout", message: "took too long" }),
        },
      ],
    });
    expect(res.choices[0]?.message.content).toBe("The tool fs.list_dir failed: took too long");
    expect(res.choices[0]?.finish_reason).toBe("stop");
  });

  it('after a failure, "fail" calls the same tool with the same arguments again, with a new id each round', async () => {
    const messages: ChatCompletionMessageParam[] = [
      { role: "user", content: "fail" },
      { role: "assistant", content: null, tool_calls: [readCall("call_1")] },
      { role: "tool", tool_call_id: "call_1", content: result("call_1", "fs.read_text", false, null, notFound) },
    ];
    const second = await complete({ tools: TOOLS, messages });
    expect(second.choices[0]?.message.tool_calls).toEqual([readCall("call_2")]);
    expect(second.choices[0]?.finish_reason).toBe("tool_calls");

    messages.push(
      { role: "assistant", content: null, tool_calls: [readCall("call_2")] },
      { role: "tool", tool_call_id: "call_2", content: result("call_2", "fs.read_text", false, null, notFound) },
    );
    const third = await complete({ tools: TOOLS, messages });
    expect(third.choices[0]?.message.tool_calls).toEqual([readCall("call_3")]);
  });

  it("in marker mode a failure is retried with the next t<k> id, and a success is summarised", async () => {
    const block = (id: string) =>
      `I'll use a tool for that.\n<<<TOOL_CALLS_JSON>>>\n[{"id":"${id}","tool":"fs.read_text","args":{"path":"does-not-exist.txt"}}]\n<<<END_TOOL_CALLS_JSON>>>`;
    const messages: ChatCompletionMessageParam[] = [
      { role: "user", content: "fail" },
      { role: "assistant", content: block("t1") },
      { role: "tool", tool_call_id: "t1", content: result("t1", "fs.read_text", false, null, notFound) },
    ];
    const retry = await complete({ model: "sophie-local-markers", messages });
    expect(retry.choices[0]?.message.content).toBe(block("t2"));

    messages.push(
      { role: "assistant", content: block("t2") },
      { role: "tool", tool_call_id: "t2", content: result("t2", "fs.read_text", true, "hi") },
    );
    const done = await complete({ model: "sophie-local-markers", messages });
    expect(done.choices[0]?.message.content).toBe('The tool fs.read_text worked. Here is what it returned: "hi"');
  });

  it("says so when a tool message is not the S4 §3 JSON result", async () => {
    const res = await complete({
      messages: [
        { role: "user", content: "list files" },
        { role: "tool", tool_call_id: "t1", content: "plain words" },
      ],
    });
    expect(res.choices[0]?.message.content).toBe("The tool answered, but not with the JSON result I expected: plain words");
  });
});

describe("local model: the rest of the API surface", () => {
  it("GET /v1/models lists both models", async () => {
    const page = await client.models.list();
    expect(page.data).toEqual([
      { id: "sophie-local", object: "model", created: 0, owned_by: "sophie" },
      { id: "sophie-local-markers", object: "model", created: 0, owned_by: "sophie" },
    ]);
    const raw = await (await fetch(`${baseURL}/models`)).json();
    expect(raw).toEqual({ object: "list", data: page.data });
  });

  it("an unknown model is a 404 model_not_found error the SDK raises as NotFoundError", async () => {
    const err = await complete({ model: "gpt-9", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const e = err as InstanceType<typeof OpenAI.NotFoundError>;
    expect(e.status).toBe(404);
    expect(e.code).toBe("model_not_found");
    expect(e.type).toBe("invalid_request_error");
    expect(e.error).toEqual({
      message: "The model `gpt-9` does not exist. This server offers: sophie-local, sophie-local-markers.",
      type: "invalid_request_error",
      param: null,
      code: "model_not_found",
    });
  });

  it("invalid JSON is a 400 invalid_request_error", async () => {
    const res = await fetch(`${baseURL}/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{nope",
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toMatch(/^The request body is not valid JSON: /);
  });

  it("a request without messages is a 400 invalid_request_error", async () => {
    const res = await fetch(`${baseURL}/chat/completions`, { method: "POST", body: JSON.stringify({ model: "sophie-local" }) });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: { message: "messages must be a non-empty array.", type: "invalid_request_error", param: null, code: "invalid_value" },
    });
  });

  it("any other path is a 404 in the OpenAI error shape", async () => {
    const res = await fetch(`${baseURL}/embeddings`, { method: "POST", body: "{}" });
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({
      error: { message: "Unknown request URL: POST /v1/embeddings.", type: "invalid_request_error", param: null, code: "unknown_url" },
    });
  });
});

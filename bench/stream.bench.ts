/**
 * Issue 23 "Streaming that stays guarded": time to the first released token with a model that streams slowly.
 * The gateway runs under `wrangler dev` (bench/support/devserver.ts) against a model that streams `TOKENS`
 * words, one every `DELAY_MS`; a client asks `POST /v1/chat/completions` with `stream: true` and times its first
 * non-empty content chunk and the end of the stream, beside the same turn without `stream` (the whole answer).
 * The guarded stream's first token is bounded below by the held words (HOLDBACK_WORDS + 1 model tokens); the
 * peer's first chunk (Agents SDK, ../shared/peers) is one model token — see docs/benchmarks.md for how to
 * measure it beside this figure.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { HOLDBACK_WORDS } from "../src/prompts/stream-guard";
import { median, round, startGatewayBench } from "./support/devserver";

/** Words the slow model streams per answer, and the delay before each. */
const TOKENS = 60;
const DELAY_MS = 20;
const ANSWER = Array.from({ length: TOKENS }, (_, i) => `word${i}`).join(" ");

/** The slow model: every chat completion streams ANSWER word by word (DELAY_MS apart); `firstTokenMs` per call. */
async function startSlowModel(_work: string, port: number): Promise<{ server: Server; firstTokenMs: number[] }> {
  const firstTokenMs: number[] = [];
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let raw = "";
    for await (const c of req) raw += c;
    if (req.method === "GET" && (req.url ?? "").endsWith("/models")) {
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(JSON.stringify({ object: "list", data: [{ id: "sophie-local", object: "model" }] }));
    }
    const body = JSON.parse(raw || "{}") as { model?: string; stream?: boolean };
    const chunk = (delta: object, finish: string | null = null) =>
      `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: body.model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const t0 = performance.now();
    const words = ANSWER.split(" ");
    if (!body.stream) {
      await new Promise((r) => setTimeout(r, DELAY_MS * TOKENS));
      res.writeHead(200, { "content-type": "application/json" });
      return res.end(
        JSON.stringify({
          id: "c",
          object: "chat.completion",
          created: 1,
          model: body.model,
          choices: [{ index: 0, message: { role: "assistant", content: ANSWER }, finish_reason: "stop" }],
          usage: { prompt_tokens: 10, completion_tokens: TOKENS, total_tokens: 10 + TOKENS },
        }),
      );
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(chunk({ role: "assistant" }));
    for (const [i, w] of words.entries()) {
      await new Promise((r) => setTimeout(r, DELAY_MS));
      if (i === 0) firstTokenMs.push(performance.now() - t0);
      res.write(chunk({ content: i === 0 ? w : ` ${w}` }));
    }
    res.write(chunk({}, "stop"));
    res.write(
      `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: body.model, choices: [], usage: { prompt_tokens: 10, completion_tokens: TOKENS, total_tokens: 10 + TOKENS } })}\n\n`,
    );
    res.end("data: [DONE]\n\n");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
  return { server, firstTokenMs };
}

/** One streamed turn: ms to the first non-empty content chunk and to `[DONE]`, and the content received. */
async function streamedTurn(base: string, token: string): Promise<{ first: number; done: number; content: string }> {
  const t0 = performance.now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "agent:main", messages: [{ role: "user", content: "hello" }], stream: true }),
  });
  if (res.status !== 200 || !res.body) throw new Error(`stream bench: POST /v1/chat/completions answered ${res.status}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let content = "";
  let first = -1;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith("data: {")) continue;
      const piece = (JSON.parse(event.slice(6)) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content;
      if (piece && first < 0) first = performance.now() - t0;
      content += piece ?? "";
    }
  }
  return { first, done: performance.now() - t0, content };
}

/** One turn without `stream`: ms to the whole answer. */
async function wholeTurn(base: string, token: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "agent:main", messages: [{ role: "user", content: "hello" }] }),
  });
  const body = (await res.json()) as { choices?: { message: { content: string } }[] };
  if (res.status !== 200 || body.choices?.[0]?.message.content !== ANSWER)
    throw new Error(`stream bench: the whole answer was wrong (${res.status})`);
  return performance.now() - t0;
}

export async function run(quick: boolean) {
  const samples = quick ? 3 : 10;
  const apiToken = `bench-${crypto.randomUUID().replaceAll("-", "")}`;
  const gateway = await startGatewayBench({
    tag: "stream bench",
    devVars: `GATEWAY_ADMIN_TOKEN=admin-${crypto.randomUUID().replaceAll("-", "")}\nGATEWAY_API_TOKENS=bench:${apiToken}\n`,
    startModel: startSlowModel,
  });
  let ok = false;
  try {
    const base = gateway.dev.base;
    await streamedTurn(base, apiToken); // warm-up: isolate, object, connections
    await wholeTurn(base, apiToken);
    gateway.model.firstTokenMs.length = 0;
    const first: number[] = [];
    const done: number[] = [];
    const whole: number[] = [];
    for (let i = 0; i < samples; i++) {
      const s = await streamedTurn(base, apiToken);
      if (s.content !== ANSWER)
        throw new Error(`stream bench: the streamed chunks do not add up to the answer: ${s.content.slice(0, 200)}`);
      first.push(s.first);
      done.push(s.done);
      whole.push(await wholeTurn(base, apiToken));
    }
    ok = true;
    return {
      model: `${TOKENS} words, one every ${DELAY_MS} ms (first token at ${DELAY_MS} ms, last at ${TOKENS * DELAY_MS} ms)`,
      held_words: HOLDBACK_WORDS,
      samples,
      first_released_token_ms_p50: round(median(first)),
      model_first_token_ms_p50: round(median(gateway.model.firstTokenMs)),
      stream_done_ms_p50: round(median(done)),
      whole_answer_ms_p50: round(median(whole)),
      first_token_vs_whole_answer: round(median(first) / median(whole), 2),
    };
  } finally {
    await gateway.dispose(ok);
  }
}

/**
 * The network boundary for tests: every `fetch` the Worker makes inside
 * workerd is answered here (Miniflare's `outboundService`, running in Node).
 *
 * Model providers are addressed as `https://<scenario>[-<anything>].provider.test/v1`,
 * so each test picks a behaviour by host and can use a unique host to count
 * only its own requests. Any other host is an unmocked request: it is answered
 * 599 and recorded, and tests assert there are none — no test reaches the internet.
 *
 * Requests are visible to tests at `GET https://mock.control/requests?host=<host>`.
 */

export interface RecordedRequest {
  method: string;
  host: string;
  path: string;
  /** Whether an Authorization header was present (its value is never recorded). */
  authorized: boolean;
}

const recorded: RecordedRequest[] = [];

/**
 * Scripted providers (`script-<id>.provider.test`): a test posts the replies in order to
 * `POST https://mock.control/script?host=<host>`, and each chat completion takes the next one.
 * Request bodies are kept and served at `GET https://mock.control/bodies?host=<host>`.
 */
export interface ScriptStep {
  content?: string | null;
  /** Tool calls as the provider sends them (`name` is the wire name). */
  tool_calls?: { id: string; name: string; arguments: string }[];
  /** An HTTP error status instead of a reply. */
  status?: number;
  delay_ms?: number;
  /** Streamed: the content in these pieces (instead of 3 characters each), each after `chunk_delay_ms` (issue 23). */
  chunks?: string[];
  chunk_delay_ms?: number;
  /**
   * The usage block (default 10/5/15); issue 25 §2: with `prompt_tokens_details.cached_tokens` as OpenAI reports a
   * cache hit, or `null` for a provider that reports no usage at all (the block is left out).
   */
  usage?: {
    prompt_tokens: number;
    completion_tokens: number;
    total_tokens: number;
    prompt_tokens_details?: { cached_tokens: number };
  } | null;
  /** A misbehaving provider: a plain JSON completion even to a streaming request (`body`), or one with no choices. */
  misbehave?: "json_to_stream" | "no_choices";
  /**
   * Issue 33: the usage block as raw JSON text, sent as written — for what `usage` cannot carry: 2^53+1 (which
   * JSON.stringify would round), strings, missing fields.
   */
  usage_raw?: string;
  /** Streamed, issue 33: the usage chunk goes after this many content pieces instead of at the end (usage reported mid-stream). */
  usage_after_chunks?: number;
  /**
   * Issue 33: streamed, after the role chunk the content waits until the test opens the host's gate
   * (`POST https://mock.control/open?host=<host>`), so a test can watch the run before any text arrives; not
   * streamed, the whole answer waits for it.
   */
  gate?: boolean;
  /** Streamed, issue 33: after the content the stream stays open — no finish, no [DONE] — until the caller hangs up (a cancel). */
  stall?: boolean;
}
const scripts = new Map<string, ScriptStep[]>();
const bodies = new Map<string, unknown[]>();
/** Issue 33: each gated host's gate; opened by the test, possibly before the request that waits on it arrives. */
const gates = new Map<string, { opened: Promise<void>; open: () => void }>();

/** The host's gate, made closed on first use (by its request or by the test's open, whichever comes first). */
function gateOf(host: string): { opened: Promise<void>; open: () => void } {
  let gate = gates.get(host);
  if (!gate) {
    let open = () => {};
    const opened = new Promise<void>((r) => {
      open = r;
    });
    gate = { opened, open };
    gates.set(host, gate);
  }
  return gate;
}

/** The usage block's JSON text: raw as scripted, the default, or none (null: the provider reports no usage). */
function usageText(step: Pick<ScriptStep, "usage" | "usage_raw">): string | null {
  if (step.usage_raw !== undefined) return step.usage_raw;
  if (step.usage === null) return null;
  return JSON.stringify(step.usage ?? { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
}

/** `body` as JSON text with its `usage` field set to the raw `usage` text (or left out). */
function withUsage(body: Record<string, unknown>, usage: string | null): string {
  if (usage === null) return JSON.stringify(body);
  return JSON.stringify({ ...body, usage: "__USAGE__" }).replace('"__USAGE__"', usage);
}

function completion(
  model: string,
  stream: boolean,
  content: string | null,
  toolCalls: ScriptStep["tool_calls"],
  step: Omit<ScriptStep, "content" | "tool_calls">,
  host = "",
) {
  const calls = toolCalls?.map((t) => ({ id: t.id, type: "function", function: { name: t.name, arguments: t.arguments } }));
  const finish = calls?.length ? "tool_calls" : "stop";
  const u = usageText(step);
  if (stream) return streamedCompletion(model, content, calls, finish, u, step, host);
  const message = { role: "assistant", content, ...(calls?.length ? { tool_calls: calls } : {}) };
  const body = {
    id: "chatcmpl-mock",
    object: "chat.completion",
    created: 0,
    model,
    choices: [{ index: 0, message, finish_reason: finish }],
  };
  return new Response(withUsage(body, u), { headers: { "content-type": "application/json" } });
}

/** A streamed completion: the role chunk, the content pieces, tool calls, finish and usage — paced, gated or stalled as scripted. */
function streamedCompletion(
  model: string,
  content: string | null,
  calls: { id: string; type: string; function: { name: string; arguments: string } }[] | undefined,
  finish: string,
  u: string | null,
  step: Omit<ScriptStep, "content" | "tool_calls">,
  host: string,
) {
  const chunk = (delta: object, finishReason: string | null = null) =>
    `data: ${JSON.stringify({ id: "chatcmpl-mock", object: "chat.completion.chunk", created: 0, model, choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`;
  const usageChunk =
    u === null ? "" : `data: ${withUsage({ id: "chatcmpl-mock", object: "chat.completion.chunk", created: 0, model, choices: [] }, u)}\n\n`;
  const parts = [chunk({ role: "assistant" })];
  const pieces = step.chunks ?? (content ?? "").match(/.{1,3}/gs) ?? [];
  for (const [i, piece] of pieces.entries()) {
    if (i === step.usage_after_chunks) parts.push(usageChunk);
    parts.push(chunk({ content: piece }));
  }
  let out = "";
  if (calls?.length) out += chunk({ tool_calls: calls.map((t, index) => ({ index, ...t })) });
  out += chunk({}, finish);
  if (step.usage_after_chunks === undefined || step.usage_after_chunks >= pieces.length) out += usageChunk;
  if (!step.stall) parts.push(`${out}data: [DONE]\n\n`);
  if (!step.chunk_delay_ms && !step.gate && !step.stall)
    return new Response(parts.join(""), { headers: { "content-type": "text/event-stream" } });
  const encoder = new TextEncoder();
  const gate = step.gate ? gateOf(host) : null;
  let hungUp = () => {};
  const hangUp = new Promise<void>((r) => {
    hungUp = r;
  });
  let sent = 0;
  const paced = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (sent === 1 && gate) await gate.opened;
      const next = parts.shift();
      // Stalled: nothing more until the caller hangs up.
      if (next === undefined) return step.stall ? hangUp : controller.close();
      if (step.chunk_delay_ms) await new Promise((r) => setTimeout(r, step.chunk_delay_ms));
      sent++;
      controller.enqueue(encoder.encode(next));
    },
    cancel() {
      hungUp();
    },
  });
  return new Response(paced, { headers: { "content-type": "text/event-stream" } });
}

async function scriptedAnswer(host: string, request: Request, url: URL): Promise<Response> {
  if (request.method === "GET" && url.pathname.endsWith("/models")) return json({ object: "list", data: [] });
  const body = (await request.json()) as { model: string; stream?: boolean };
  bodies.set(host, [...(bodies.get(host) ?? []), body]);
  const step = scripts.get(host)?.shift();
  if (!step) return json({ error: { message: "script exhausted", type: "server_error" } }, 500);
  if (step.delay_ms) await new Promise((r) => setTimeout(r, step.delay_ms));
  // Issue 33: a gated plain completion is held whole until the test opens the gate (a call in flight, for a cancel).
  if (step.gate && body.stream !== true) await gateOf(host).opened;
  if (step.status) return json({ error: { message: `scripted ${step.status}`, type: "scripted" } }, step.status);
  if (step.misbehave === "no_choices") return json({ id: "chatcmpl-empty", object: "chat.completion", model: body.model, choices: [] });
  if (step.misbehave === "json_to_stream") return completion(body.model, false, step.content ?? null, step.tool_calls, step);
  return completion(body.model, body.stream === true, step.content ?? null, step.tool_calls, step, host);
}

/** Models the `ok` scenario's provider lists. */
const LISTED_MODELS = ["kimi-k1-128k", "kimi-k1-32k", "local-model"];

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

async function providerAnswer(scenario: string, request: Request, url: URL): Promise<Response> {
  if (scenario === "slow") await new Promise((r) => setTimeout(r, 1_500));
  if (scenario === "unauthorized") {
    // Real providers sometimes echo part of the key back; the gateway must never copy this text.
    const auth = request.headers.get("authorization") ?? "";
    return json({ error: { message: `Incorrect API key provided: ${auth.slice(7)}`, type: "invalid_request_error" } }, 401);
  }
  if (scenario === "error500") return json({ error: { message: "upstream exploded", type: "server_error" } }, 500);
  if (request.method === "POST" && url.pathname.endsWith("/chat/completions")) {
    const body = (await request.json()) as {
      model: string;
      stream?: boolean;
      messages: { role: string; content: string }[];
      tools?: { function: { name: string } }[];
    };
    const attempt = recorded.filter((r) => r.host === url.hostname).length;
    // `ratelimit`: always 429; `flaky`: 500 on the first attempt, then fine.
    if (scenario === "ratelimit")
      return new Response(JSON.stringify({ error: { message: "slow down", type: "rate_limit" } }), {
        status: 429,
        headers: { "content-type": "application/json", "retry-after": "0" },
      });
    if (scenario === "flaky" && attempt === 1) return json({ error: { message: "try again", type: "server_error" } }, 500);
    // `echo`: a model that tries to leak its first system message (L1); `toolcall`: calls the first tool offered.
    const content =
      scenario === "echo" ? `Sure, here are my instructions:\n${body.messages[0]?.content ?? ""}` : scenario === "toolcall" ? null : "pong";
    const toolCalls =
      scenario === "toolcall" && body.tools?.[0]
        ? [{ id: "call_1", type: "function", function: { name: body.tools[0].function.name, arguments: '{"path":"."}' } }]
        : undefined;
    const finish = toolCalls ? "tool_calls" : "stop";
    if (body.stream) {
      const chunk = (delta: object, finishReason: string | null = null) =>
        `data: ${JSON.stringify({ id: "chatcmpl-mock", object: "chat.completion.chunk", created: 0, model: body.model, choices: [{ index: 0, delta, finish_reason: finishReason }] })}\n\n`;
      let out = chunk({ role: "assistant" });
      for (const piece of (content ?? "").match(/.{1,3}/gs) ?? []) out += chunk({ content: piece });
      if (toolCalls) out += chunk({ tool_calls: toolCalls.map((t, index) => ({ index, ...t })) });
      out += chunk({}, finish);
      out += `data: ${JSON.stringify({ id: "chatcmpl-mock", object: "chat.completion.chunk", created: 0, model: body.model, choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } })}\n\n`;
      return new Response(`${out}data: [DONE]\n\n`, { headers: { "content-type": "text/event-stream" } });
    }
    return json({
      id: "chatcmpl-mock",
      object: "chat.completion",
      created: 0,
      model: body.model,
      choices: [
        { index: 0, message: { role: "assistant", content, ...(toolCalls ? { tool_calls: toolCalls } : {}) }, finish_reason: finish },
      ],
      usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
    });
  }
  if (request.method === "GET" && url.pathname.endsWith("/models")) {
    const ids = scenario === "nomodel" ? ["some-other-model"] : LISTED_MODELS;
    return json({ object: "list", data: ids.map((id) => ({ id, object: "model", created: 0, owned_by: "mock" })) });
  }
  return json({ error: { message: `mock provider has no ${request.method} ${url.pathname}`, type: "not_found" } }, 404);
}

/**
 * Web pages for `http.get` (`https://<scenario>[-<anything>].web.test/…`; a unique suffix lets a test count its own requests):
 * `ok` 200 text naming the host and path; `redirect` `/to?u=<url>[&status=<3xx>]` redirects to `u`, `/loop` redirects to itself;
 * `big` `?bytes=<n>&fill=<text>` streams n bytes (default 2 MiB of `a`); `slow` answers after 2 s; `binary` is image/png;
 * `notype` has no content type (`?binary=1` for non-UTF-8 bytes); `missing` is a 404 page; `json` is application/json.
 */
async function webAnswer(scenario: string, url: URL): Promise<Response> {
  const text = (body: string, status = 200) => new Response(body, { status, headers: { "content-type": "text/plain; charset=utf-8" } });
  switch (scenario) {
    case "ok":
      return text(`hello from ${url.hostname}${url.pathname}`);
    case "redirect": {
      if (url.pathname === "/loop") return new Response(null, { status: 302, headers: { location: "/loop" } });
      const to = url.searchParams.get("u");
      if (!to) return text("no u", 400);
      return new Response(null, { status: Number(url.searchParams.get("status") ?? 302), headers: { location: to } });
    }
    case "big": {
      const total = Number(url.searchParams.get("bytes") ?? 2 * 1024 * 1024);
      const fill = new TextEncoder().encode(url.searchParams.get("fill") ?? "a");
      const chunk = new Uint8Array(64 * 1024);
      for (let i = 0; i < chunk.length; i++) chunk[i] = fill[i % fill.length] ?? 97;
      let sent = 0;
      const stream = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (sent >= total) return controller.close();
          const n = Math.min(chunk.length, total - sent);
          controller.enqueue(chunk.slice(0, n));
          sent += n;
        },
      });
      return new Response(stream, { headers: { "content-type": "text/plain; charset=utf-8" } });
    }
    case "slow":
      await new Promise((r) => setTimeout(r, 2_000));
      return text("finally");
    case "binary":
      return new Response(new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), { headers: { "content-type": "image/png" } });
    case "notype":
      return new Response(
        url.searchParams.has("binary") ? new Uint8Array([0xff, 0xfe, 0x00, 0x01]) : new TextEncoder().encode("plain bytes"),
      );
    case "missing":
      return new Response("<h1>not here</h1>", { status: 404, headers: { "content-type": "text/html" } });
    case "json":
      return json({ hello: "world" });
    default:
      return text(`mock web has no scenario ${scenario}`, 404);
  }
}

/** A POST a webhook receiver (`*.hook.test`) got, and what it answered. */
export interface ReceivedHook {
  host: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  answered: number;
}
const hooks: ReceivedHook[] = [];

/**
 * Webhook receivers (`https://<scenario>[-<anything>].hook.test/…`), for job notifications and runs' completion webhooks:
 * `ok` 200; `flaky` 503 (or `?code=<status>`) for the first `?fail=<n>` (default 1) deliveries to the host, then 200; `down` always 503;
 * `reject` 400; `gone` 410; `moved` 301; `slow` answers 200 after 2 s. Every delivery is kept, with its headers and
 * body, at `GET https://mock.control/hooks?host=<host>`.
 */
async function hookAnswer(scenario: string, request: Request, url: URL): Promise<Response> {
  const body = await request.text();
  const headers: Record<string, string> = {};
  for (const [k, v] of request.headers) headers[k] = v;
  const earlier = hooks.filter((h) => h.host === url.hostname).length;
  let status = 200;
  if (scenario === "flaky")
    status = earlier < Number(url.searchParams.get("fail") ?? 1) ? Number(url.searchParams.get("code") ?? 503) : 200;
  else if (scenario === "down") status = 503;
  else if (scenario === "reject") status = 400;
  else if (scenario === "gone") status = 410;
  else if (scenario === "moved") status = 301;
  else if (scenario === "slow") await new Promise((r) => setTimeout(r, 2_000));
  hooks.push({ host: url.hostname, path: url.pathname, headers, body, answered: status });
  return new Response(status === 200 ? "ok" : "no", { status, headers: status === 301 ? { location: "https://ok.hook.test/" } : {} });
}

/** A message a mock chat platform (`*.telegram.test`, `*.slack.test`, `*.discord.test`) received. */
export interface PlatformPost {
  host: string;
  method: string;
  body: Record<string, unknown>;
  /**
   * Whether the bot token was presented (in the path for Telegram, as a bearer token for Slack; Discord: a
   * `/webhooks/{app}/{token}` path for a follow-up, `Authorization: Bot …` for a channel message).
   */
  authorized: boolean;
  answered: number;
  /** Discord only: the request path (`/api/v10/webhooks/{application_id}/{interaction_token}`, `/api/v10/channels/{id}/messages`). */
  path?: string;
}
const platformPosts: PlatformPost[] = [];

/**
 * Chat platform APIs: Telegram Bot API at `https://<scenario>[-x].telegram.test/bot<token>/sendMessage`, Slack Web API at
 * `https://<scenario>[-x].slack.test/api/chat.postMessage`. Scenarios: `ok`; `flaky` — the first `fail` (default 1, from a
 * host label `flaky<n>`) posts to the host answer 429 (Telegram `retry_after: 0`) or 500, then ok; `limited` — the first
 * post answers 429 on either platform (Slack with `Retry-After: 0`), then ok; `editflaky` — the first message edit
 * (`editMessageText`, `chat.update`) answers 429, everything else ok; `down` always 500.
 * Seen at `GET https://mock.control/platform?host=<host>`.
 */
async function platformAnswer(kind: "telegram" | "slack" | "discord", scenario: string, request: Request, url: URL): Promise<Response> {
  if (kind === "discord") return discordAnswer(scenario, request, url);
  const body = (await request.json().catch(() => ({}))) as Record<string, unknown>;
  const earlier = platformPosts.filter((p) => p.host === url.hostname).length;
  const flaky = /^flaky(\d*)$/.exec(scenario);
  const failFirst = flaky ? Number(flaky[1] || 1) : 0;
  const authorized =
    kind === "telegram"
      ? /^\/bot\d+:[A-Za-z0-9_-]+\//.test(url.pathname)
      : (request.headers.get("authorization") ?? "").startsWith("Bearer xoxb-");
  let status = 200;
  if (scenario === "down" || (flaky && earlier < failFirst)) status = kind === "telegram" && flaky ? 429 : 500;
  if (scenario === "limited" && earlier === 0) status = 429;
  const method = url.pathname.split("/").at(-1) ?? "";
  const edit = method === "editMessageText" || method === "chat.update";
  if (scenario === "editflaky" && edit && !platformPosts.some((p) => p.host === url.hostname && p.method === method)) status = 429;
  platformPosts.push({ host: url.hostname, method, body, authorized, answered: status });
  if (kind === "telegram") {
    if (status === 429)
      return json({ ok: false, error_code: 429, description: "Too Many Requests: retry after 0", parameters: { retry_after: 0 } }, 429);
    if (status !== 200) return json({ ok: false, error_code: status, description: "Internal Server Error" }, status);
    return json({ ok: true, result: { message_id: 1000 + earlier, chat: { id: body.chat_id }, text: body.text } });
  }
  if (status === 429)
    return new Response(JSON.stringify({ ok: false, error: "ratelimited" }), {
      status,
      headers: { "content-type": "application/json", "retry-after": "0" },
    });
  if (status !== 200) return json({ ok: false, error: "internal_error" }, status);
  return json({ ok: true, channel: body.channel, ts: `1700000000.${String(100000 + earlier)}` });
}

/**
 * Discord at `https://<scenario>[-x].discord.test/api/v10/…`: the interaction webhook `/webhooks/{application_id}/{token}`
 * (Create Followup Message, recorded with method `followup`) and, with a bot token, `/channels/{channel_id}/messages`
 * (Create Message — a job's report; method `createMessage`, `authorized` when `Authorization: Bot <token>` was sent;
 * the token itself is never recorded). Scenarios as for Telegram and Slack: `ok`; `flaky<n>` — the first n (default 1)
 * posts to the host answer 429 (`retry_after: 0`), then ok; `limited` — the first post answers 429 with
 * `retry_after: 0` in the body and `Retry-After: 0`, then ok; `down` always 500. Recorded with the path.
 */
async function discordAnswer(scenario: string, request: Request, url: URL): Promise<Response> {
  const body = (await request.json().catch(() => ({}))) as Record<string, unknown>;
  const earlier = platformPosts.filter((p) => p.host === url.hostname).length;
  const flaky = /^flaky(\d*)$/.exec(scenario);
  const limited = scenario === "limited" && earlier === 0;
  const status = scenario === "down" ? 500 : (flaky && earlier < Number(flaky[1] || 1)) || limited ? 429 : 200;
  const channel = /^\/api\/v10\/channels\/(\d+)\/messages$/.exec(url.pathname);
  const authorized = channel
    ? /^Bot [A-Za-z0-9_.-]+$/.test(request.headers.get("authorization") ?? "")
    : /^\/api\/v10\/webhooks\/\d+\/[A-Za-z0-9_.-]+$/.test(url.pathname);
  const method = channel ? "createMessage" : "followup";
  platformPosts.push({ host: url.hostname, method, body, authorized, answered: status, path: url.pathname });
  if (status === 429) {
    const headers = { "content-type": "application/json", ...(limited ? { "retry-after": "0" } : {}) };
    return new Response(JSON.stringify({ message: "You are being rate limited.", retry_after: 0, global: false }), { status, headers });
  }
  if (status !== 200) return json({ message: "500: Internal Server Error", code: 0 }, status);
  return json({ id: String(1_100_000_000_000_000_000n + BigInt(earlier)), content: body.content, channel_id: channel?.[1] ?? "1" });
}

/** Miniflare `outboundService`. */
export async function outboundService(request: Request): Promise<Response> {
  const url = new URL(request.url);
  if (url.hostname === "mock.control") {
    const host = url.searchParams.get("host");
    if (url.pathname === "/script" && host) {
      scripts.set(host, (await request.json()) as ScriptStep[]);
      return json({ ok: true });
    }
    if (url.pathname === "/bodies" && host) return json(bodies.get(host) ?? []);
    if (url.pathname === "/open" && host) {
      gateOf(host).open();
      return json({ ok: true });
    }
    if (url.pathname === "/hooks" && host) return json(hooks.filter((h) => h.host === host));
    if (url.pathname === "/platform" && host) return json(platformPosts.filter((p) => p.host === host));
    return json(host ? recorded.filter((r) => r.host === host) : recorded);
  }
  recorded.push({ method: request.method, host: url.hostname, path: url.pathname, authorized: request.headers.has("authorization") });
  const provider = /^([a-z0-9]+)(?:-[a-z0-9-]+)?\.provider\.test$/.exec(url.hostname);
  if (provider?.[1] === "script") return scriptedAnswer(url.hostname, request, url);
  if (provider?.[1]) return providerAnswer(provider[1], request, url);
  const platform = /^([a-z0-9]+)(?:-[a-z0-9-]+)?\.(telegram|slack|discord)\.test$/.exec(url.hostname);
  if (platform?.[1]) return platformAnswer(platform[2] as "telegram" | "slack" | "discord", platform[1], request, url);
  const hook = /^([a-z0-9]+)(?:-[a-z0-9-]+)?\.hook\.test$/.exec(url.hostname);
  if (hook?.[1]) return hookAnswer(hook[1], request, url);
  const web = /^([a-z0-9]+)(?:-[a-z0-9-]+)?\.web\.test$/.exec(url.hostname);
  if (web?.[1]) return webAnswer(web[1], url);
  return new Response(`unmocked outbound request: ${request.method} ${url.origin}${url.pathname}`, { status: 599 });
}

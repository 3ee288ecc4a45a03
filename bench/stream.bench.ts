/**
 * Issue 23 "Streaming that stays guarded": time to the first released token with a model that streams slowly.
 * The gateway runs under `wrangler dev` (bench/support/devserver.ts) against a model that streams `TOKENS`
 * words, one every `DELAY_MS`; a client asks `POST /v1/chat/completions` with `stream: true` and times its first
 * non-empty content chunk and the end of the stream, beside the same turn without `stream` (the whole answer).
 * Issue 33: the guard holds only what could still become hidden text (a run of hidden words, an encoded run, a
 * marker block) and the word being written, so a benign answer's first word is released once the model's second
 * chunk shows it complete; the issue's target is a first released token at most 2x the peer's first chunk.
 * With `npm run bench -- --peer` the peer (the Agents SDK's AIChatAgent, bench/support/peer-agent.ts) runs under
 * its own `wrangler dev` against the same model server, and its turns are interleaved with ours, one for one: time
 * to its first frame carrying a text delta and to its `done` frame (results.stream.peer_first_chunk). Three windows
 * of 10 turns each; every headline figure is the median of the windows' p50s, each window's reported beside it.
 */
import { rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { latencySummary, median, round, startGatewayBench } from "./support/devserver";
import { type PeerAgent, PeerConversation, type PeerCopy, preparePeer, startPeer } from "./support/peer-agent";

/** Words the slow model streams per answer, and the delay before each. */
const TOKENS = 60;
const DELAY_MS = 20;
/**
 * A benign answer of `TOKENS` words (ordinary prose, nothing like the hidden layers): what a caller streams most.
 * Issue 23's answer was `word0 … word59`, which no guard finds suspicious; prose with everyday phrases is the harder case.
 */
const PROSE =
  "Start the dough the night before so the flour has time to absorb the water. In the morning, fold it gently four times, " +
  "let it rest in a warm corner for about two hours, then shape it into a tight round and bake it in a very hot oven " +
  "until the crust sounds hollow when you tap it underneath and the kitchen smells of toast.";
const ANSWER = PROSE.split(" ").slice(0, TOKENS).join(" ");

/**
 * The slow model: every chat completion streams ANSWER word by word (DELAY_MS apart); `firstTokenMs` per call, and
 * `calledAt`, when each call arrived (this process's clock, the client's too: the gateway's time before the model).
 */
async function startSlowModel(_work: string, port: number): Promise<SlowModel> {
  const firstTokenMs: number[] = [];
  const calledAt: number[] = [];
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const arrived = performance.now();
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
    calledAt.push(arrived);
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
  return { server, firstTokenMs, calledAt };
}

interface SlowModel {
  server: Server;
  firstTokenMs: number[];
  calledAt: number[];
}

/**
 * One streamed turn: ms to the first non-empty content chunk and to `[DONE]`, and the content received. Without
 * `user` a session of its own (the headline figure); with it, the next turn of that conversation.
 */
async function streamedTurn(
  base: string,
  token: string,
  user?: string,
  model?: SlowModel,
): Promise<{ first: number; done: number; content: string; modelCalled: number }> {
  const t0 = performance.now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "agent:main", messages: [{ role: "user", content: "hello" }], stream: true, user }),
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
  const called = model?.calledAt.findLast((at) => at >= t0);
  return { first, done: performance.now() - t0, content, modelCalled: called === undefined ? Number.NaN : called - t0 };
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

/**
 * Our WebSocket route (`GET /v1/chat/socket`), one conversation, as the peer's turns go over its socket: a message
 * frame with `stream: true`, timed to its first `delta` frame with text and to its `run` frame.
 */
class SocketChat {
  readonly #ws: WebSocket;
  #turn: ((f: { type: string; id?: string; text?: string; run?: { output: string } }) => void) | null = null;
  #n = 0;

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.addEventListener("message", (e) => this.#turn?.(JSON.parse(String(e.data))));
  }

  static async open(base: string, token: string): Promise<SocketChat> {
    const url = `${base.replace(/^http/, "ws")}/v1/chat/socket?agent_id=main&room_id=stream-bench&user_id=${crypto.randomUUID()}`;
    const ws = new WebSocket(url, ["sophie.v1", `bearer.${Buffer.from(token).toString("base64url")}`]);
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener("open", () => resolve(), { once: true });
      ws.addEventListener("error", () => reject(new Error(`stream bench: could not open ${url}`)), { once: true });
    });
    return new SocketChat(ws);
  }

  /** One streamed turn: ms to the first delta with text, to the run frame, and the deltas' text. */
  async turn(): Promise<{ first: number; done: number; content: string }> {
    const id = `s${this.#n++}`;
    const t0 = performance.now();
    let first = -1;
    let content = "";
    const done = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("stream bench: a socket turn took over 30 s")), 30_000);
      this.#turn = (f) => {
        if (f.id !== id) return;
        if (f.type === "error") reject(new Error(`stream bench: socket error frame ${JSON.stringify(f).slice(0, 300)}`));
        if (f.type === "delta" && f.text) {
          if (first < 0) first = performance.now() - t0;
          content += f.text;
        }
        if (f.type === "run") {
          clearTimeout(timer);
          resolve(performance.now() - t0);
        }
      };
      this.#ws.send(JSON.stringify({ type: "message", id, text: "hello", stream: true }));
    });
    return { first, done, content };
  }

  close(): void {
    this.#ws.close();
  }
}

/** The peer beside ours: its copy installed while our gateway starts, then its Worker on our model's port. */
interface PeerSide {
  agent: PeerAgent;
  chat: PeerConversation;
  first: number[];
  done: number[];
  modelFirst: number[];
}

/** Starts the peer against the model on `modelPort` and warms it up (one turn); the reason as a string if it cannot. */
async function startPeerSide(copy: Promise<PeerCopy>, modelPort: number): Promise<PeerSide | string> {
  let agent: PeerAgent | undefined;
  try {
    agent = await startPeer(await copy, modelPort, "stream bench (peer)");
    const chat = await PeerConversation.open(agent.dev.base, `stream-${crypto.randomUUID()}`);
    const warm = await chat.turn("hello");
    if (warm.text !== ANSWER) throw new Error(`the peer's answer is not the model's: ${warm.text.slice(0, 200)}`);
    return { agent, chat, first: [], done: [], modelFirst: [] };
  } catch (err) {
    await agent?.dispose(false);
    return `the peer could not run: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}`;
  }
}

/** One peer turn, checked; the model's first-token time of that call moves from ours to the peer's list. */
async function peerTurn(peer: PeerSide, model: { firstTokenMs: number[] }): Promise<void> {
  const before = model.firstTokenMs.length;
  const t = await peer.chat.turn("hello");
  if (t.text !== ANSWER) throw new Error(`stream bench: the peer's text deltas do not add up to the answer: ${t.text.slice(0, 200)}`);
  peer.first.push(t.first);
  peer.done.push(t.done);
  peer.modelFirst.push(...model.firstTokenMs.splice(before));
}

/** `opts.peer` (`npm run bench -- --peer`): measure the peer's first chunk beside ours with the same model. */
export async function run(quick: boolean, _prepared?: unknown, _settle?: unknown, opts: { peer?: boolean } = {}) {
  const samples = quick ? 3 : 10;
  const windows = quick ? 1 : 3;
  const apiToken = `bench-${crypto.randomUUID().replaceAll("-", "")}`;
  // The peer's copy and `npm ci` go beside our gateway's start-up (neither is measured).
  const peerCopy = opts.peer ? preparePeer("stream bench (peer)") : undefined;
  peerCopy?.catch(() => {}); // reported below
  const gateway = await startGatewayBench({
    tag: "stream bench",
    devVars: `GATEWAY_ADMIN_TOKEN=admin-${crypto.randomUUID().replaceAll("-", "")}\nGATEWAY_API_TOKENS=bench:${apiToken}\n`,
    startModel: startSlowModel,
  }).catch(async (err) => {
    await peerCopy?.then((c) => rmSync(c.tmp, { recursive: true, force: true })).catch(() => {});
    throw err;
  });
  let ok = false;
  let socket: SocketChat | undefined;
  let peer: PeerSide | string = "not measured: pass --peer (npm run bench -- --only=stream --peer)";
  try {
    const base = gateway.dev.base;
    if (peerCopy) peer = await startPeerSide(peerCopy, (gateway.model.server.address() as AddressInfo).port);
    const user = `stream-${crypto.randomUUID()}`; // one conversation, as the peer's turns are
    await streamedTurn(base, apiToken); // warm-up: isolate, object, connections
    await wholeTurn(base, apiToken);
    await streamedTurn(base, apiToken, user);
    socket = await SocketChat.open(base, apiToken);
    await socket.turn();
    gateway.model.firstTokenMs.length = 0;
    const first: number[] = [];
    const done: number[] = [];
    const whole: number[] = [];
    const inConversation: number[] = [];
    const beforeModel: number[] = [];
    const beforeModelInConversation: number[] = [];
    const overSocket: number[] = [];
    // Several windows, each interleaving ours and the peer's turns one for one: a figure is the median of the
    // windows' p50s, reported with each window's (one window is noise on this machine).
    const perWindow: { first: number; conv: number; ws: number; peer: number | null }[] = [];
    for (let w = 0; w < windows; w++) {
      const at = { first: first.length, peer: typeof peer === "string" ? 0 : peer.first.length };
      for (let i = 0; i < samples; i++) {
        const s = await streamedTurn(base, apiToken, undefined, gateway.model);
        if (s.content !== ANSWER)
          throw new Error(`stream bench: the streamed chunks do not add up to the answer: ${s.content.slice(0, 200)}`);
        first.push(s.first);
        beforeModel.push(s.modelCalled);
        done.push(s.done);
        whole.push(await wholeTurn(base, apiToken));
        const c = await streamedTurn(base, apiToken, user, gateway.model);
        if (c.content !== ANSWER) throw new Error(`stream bench: a conversation's streamed chunks are wrong: ${c.content.slice(0, 200)}`);
        inConversation.push(c.first);
        beforeModelInConversation.push(c.modelCalled);
        const ws = await socket.turn();
        if (ws.content !== ANSWER) throw new Error(`stream bench: the socket's deltas are wrong: ${ws.content.slice(0, 200)}`);
        overSocket.push(ws.first);
        if (typeof peer !== "string") await peerTurn(peer, gateway.model);
      }
      perWindow.push({
        first: median(first.slice(at.first)),
        conv: median(inConversation.slice(at.first)),
        ws: median(overSocket.slice(at.first)),
        peer: typeof peer === "string" ? null : median(peer.first.slice(at.peer)),
      });
    }
    ok = true;
    const ttft = median(perWindow.map((w) => w.first));
    const conv = median(perWindow.map((w) => w.conv));
    const overWs = median(perWindow.map((w) => w.ws));
    const peerP50 = typeof peer === "string" ? null : median(perWindow.map((w) => w.peer as number));
    const ratios = perWindow.map((w) => (w.peer === null ? null : round(w.conv / w.peer, 2)));
    const wsRatios = perWindow.map((w) => (w.peer === null ? null : round(w.ws / w.peer, 2)));
    return {
      model: `${TOKENS} words, one every ${DELAY_MS} ms (first token at ${DELAY_MS} ms, last at ${TOKENS * DELAY_MS} ms)`,
      hold: "issue 33 (D-091): only a possible start of hidden text (a run of hidden words from its second word, an encoded run, a marker block) and the word being written",
      samples: `${windows} windows of ${samples} turns each (ours and the peer's interleaved)`,
      windows: perWindow.map((w, i) => ({
        own_session_ms_p50: round(w.first),
        in_conversation_ms_p50: round(w.conv),
        websocket_ms_p50: round(w.ws),
        ...(w.peer === null ? {} : { peer_ms_p50: round(w.peer), in_conversation_vs_peer: ratios[i], websocket_vs_peer: wsRatios[i] }),
      })),
      first_released_token_ms_p50: round(ttft),
      model_first_token_ms_p50: round(median(gateway.model.firstTokenMs)),
      // Where the first token's time goes: the gateway's work before it calls the model, then the model's first
      // word, then what the guard holds (the rest).
      model_called_after_ms_p50: round(median(beforeModel)),
      model_called_after_ms_p50_in_conversation: round(median(beforeModelInConversation)),
      stream_done_ms_p50: round(median(done)),
      whole_answer_ms_p50: round(median(whole)),
      first_token_vs_whole_answer: round(ttft / median(whole), 2),
      first_released_token_ms_p50_in_conversation: round(conv),
      // The same conversation's transport as the peer's: our WebSocket route, a message frame with stream: true.
      first_released_token_ms_p50_websocket: round(overWs),
      // The spread of each (ours and the peer's turns alternate, one for one, so a slow moment falls on both).
      first_released_token_spread: latencySummary(first),
      first_released_token_in_conversation_spread: latencySummary(inConversation),
      first_released_token_websocket_spread: latencySummary(overSocket),
      peer_first_chunk:
        typeof peer === "string"
          ? { unavailable: peer }
          : {
              how: "the peer's AIChatAgent under wrangler dev, same model server, one conversation over its WebSocket, turns interleaved with ours: cf_agent_use_chat_request sent -> first frame with a text-delta chunk",
              ...latencySummary(peer.first),
              p50_ms: round(peerP50 as number), // the median of the windows' p50s, as ours
              done_ms_p50: round(median(peer.done)),
              model_first_token_ms_p50: round(median(peer.modelFirst)),
            },
      ...(typeof peer === "string"
        ? {}
        : {
            first_token_vs_peer_first_chunk: round(ttft / (peerP50 as number), 2),
            in_conversation_vs_peer_first_chunk: round(conv / (peerP50 as number), 2),
            in_conversation_vs_peer_by_window: ratios,
            websocket_vs_peer_first_chunk: round(overWs / (peerP50 as number), 2),
            websocket_vs_peer_by_window: wsRatios,
          }),
    };
  } finally {
    socket?.close();
    if (typeof peer !== "string") {
      peer.chat.close();
      await peer.agent.dispose(ok);
    }
    await gateway.dispose(ok);
  }
}

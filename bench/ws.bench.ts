// The WebSocket conversation route (issue 23, docs/api.md "WebSocket conversations") beside the HTTP front door,
// in the same sitting: 8 concurrent conversations, each one long-lived session with one socket open into it (as the
// Agents SDK peer's conversations are), plain turns ("hello": 1 model call) against the offline zero-latency model,
// then tool-round turns in the same socket conversations ("list files": 1 tool call, 2 model calls, each checked).
// A socket turn is one `message` frame, answered when its `run` frame arrives (after run.completed). The same
// phases run through POST /v1/chat/completions (user = conversation), the figure the issue sets the socket beside.
// The gateway, model and token are turn.bench.ts's set-up.
import { closedLoop, latencySummary, sequential } from "./support/devserver";
import { type Prepared, prepare, TOOL_MESSAGE, TOOL_REPLY, toolRoundConversations } from "./turn.bench";

const CONCURRENCY = 8;
const REPLY = "Hello from the offline model";

interface RunFrame {
  type: "run";
  id: string;
  run: { id: string; status: string; output: string; tool_calls: number };
}

/** One conversation's socket: sends a message frame and resolves with its `run` frame. */
class Conversation {
  readonly #ws: WebSocket;
  readonly #pending = new Map<string, { resolve: (f: RunFrame) => void; reject: (e: Error) => void }>();
  #next = 0;

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.addEventListener("message", (e) => {
      const frame = JSON.parse(String(e.data)) as { type: string; id?: string; error?: unknown };
      const waiting = frame.id === undefined ? undefined : this.#pending.get(frame.id);
      if (!waiting || !frame.id) return;
      if (frame.type === "error") waiting.reject(new Error(`ws bench: error frame ${JSON.stringify(frame)}`));
      if (frame.type === "run") waiting.resolve(frame as RunFrame);
      if (frame.type === "error" || frame.type === "run") this.#pending.delete(frame.id);
    });
    ws.addEventListener("close", () => {
      for (const w of this.#pending.values()) w.reject(new Error("ws bench: socket closed mid-turn"));
    });
  }

  /** Opens the socket with the token as the browser-style subprotocol. */
  static async open(base: string, token: string, name: string): Promise<Conversation> {
    const url = `${base.replace(/^http/, "ws")}/v1/chat/socket?agent_id=main&room_id=bench-ws&user_id=${name}`;
    const bearer = `bearer.${Buffer.from(token).toString("base64url")}`;
    const ws = new WebSocket(url, ["sophie.v1", bearer]);
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener("open", () => resolve(), { once: true });
      ws.addEventListener("error", () => reject(new Error(`ws bench: could not open ${url}`)), { once: true });
    });
    if (ws.protocol !== "sophie.v1") throw new Error(`ws bench: subprotocol ${ws.protocol}`);
    return new Conversation(ws);
  }

  /** One turn over the socket, checked (its reply, and its tool calls from the `run` frame); resolves the run id. */
  async turn(text = "hello", reply = REPLY, toolCalls = 0): Promise<string> {
    const id = `t${this.#next++}-${Math.random().toString(36).slice(2, 10)}`;
    const done = new Promise<RunFrame>((resolve, reject) => this.#pending.set(id, { resolve, reject }));
    this.#ws.send(JSON.stringify({ type: "message", id, text }));
    const { run } = await done;
    if (run.status !== "completed" || !run.output.startsWith(reply) || run.tool_calls !== toolCalls)
      throw new Error(`ws bench: turn ended ${JSON.stringify(run).slice(0, 300)}`);
    return run.id;
  }

  close(): void {
    this.#ws.close();
  }
}

export async function run(quick: boolean, prepared?: Promise<Prepared>) {
  const n = quick ? 8 : 100;
  const seconds = quick ? 2 : 15;
  const gateway = await (prepared ?? prepare(quick));
  const { apiToken, dev } = gateway;
  const base = dev.base;
  const group = dev.child.pid as number;
  const auth = { authorization: `Bearer ${apiToken}`, "content-type": "application/json" };
  let ok = false;
  const sockets: Conversation[] = [];
  try {
    async function openAiTurn(conversation: string): Promise<void> {
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ model: "agent:main", user: conversation, messages: [{ role: "user", content: "hello" }] }),
      });
      const text = await res.text();
      if (res.status !== 200 || !text.includes(REPLY))
        throw new Error(`ws bench: /v1/chat/completions answered ${res.status}: ${text.slice(0, 300)}`);
    }
    for (let c = 0; c < CONCURRENCY; c++) sockets.push(await Conversation.open(base, apiToken, `ws-${c}`));
    const phases = [
      [
        "websocket",
        "GET /v1/chat/socket, one socket per conversation, a message frame per turn",
        (c: number) => (sockets[c] as Conversation).turn(),
      ],
      ["openai_chat_completions", "POST /v1/chat/completions (user = conversation)", (c: number) => openAiTurn(`ws-bench-openai-${c}`)],
    ] as const;
    const result: Record<string, unknown> = { model: "scripts/local-model.mjs (offline, zero latency)", concurrency: CONCURRENCY };
    for (const [name, endpoint, once] of phases) {
      // Warm: each conversation's object exists (and, for the sockets, its socket is open) before measuring.
      for (let i = 0; i < 3; i++) await Promise.all(Array.from({ length: CONCURRENCY }, (_, c) => once(c)));
      const seq = await sequential(n, group, () => once(0));
      const conc = await closedLoop({ concurrency: CONCURRENCY, seconds, group, once: (c) => once(c) });
      result[name] = {
        endpoint,
        turns_per_s_8_concurrent: conc.per_s,
        concurrent: { ...latencySummary(conc.latency), seconds: conc.seconds, workerd_cpu_ms_per_turn: conc.workerd_cpu_ms_per_op },
        sequential: { ...latencySummary(seq.latency), workerd_cpu_ms_per_turn: seq.workerd_cpu_ms_per_op },
      };
    }
    // Tool-round turns (1 tool call, 2 model calls each, checked) as the next turns of the same 8 socket conversations
    // (8 more sockets would pass the caller's limit of open event streams, `limits.maxOpenStreamsPerCaller`).
    const toolSockets = sockets;
    result.websocket_tool_round = await toolRoundConversations({
      endpoint: "GET /v1/chat/socket, one socket per conversation, one tool call per turn",
      quick,
      n,
      seconds,
      group,
      calls: gateway.model.calls,
      turn: (c) => (toolSockets[c] as Conversation).turn(TOOL_MESSAGE, TOOL_REPLY, 1),
    });
    const rate = (name: string) => (result[name] as { turns_per_s_8_concurrent: number }).turns_per_s_8_concurrent;
    result.websocket_to_openai_ratio = Math.round((rate("websocket") / rate("openai_chat_completions")) * 100) / 100;
    ok = true;
    return result;
  } finally {
    for (const s of sockets) s.close();
    await gateway.dispose(ok);
  }
}

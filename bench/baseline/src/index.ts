/**
 * The bench baseline Worker: per request, exactly one Durable Object SQLite
 * write (an INSERT in the object's own storage) and one R2 put, then a small
 * JSON answer. Every gateway route that records anything does at least this,
 * so its throughput and latency under `wrangler dev` are the floor the
 * gateway's figures are divided by (docs/benchmarks.md). `GET /healthz`
 * answers without touching storage (readiness only).
 *
 * `POST /cost/{op}` prices one kind of operation on its own under the same
 * `wrangler dev` (the unit costs docs/benchmarks.md sets beside a turn's
 * inventory of operations): `rpc` (a Durable Object RPC that does no I/O),
 * `sql` (an RPC with one SQLite insert), `r2` (one R2 put from the Worker),
 * `log` (one JSON console line, about the size of the gateway's), `alarm`
 * (an RPC that sets the object's alarm), `d1` (one D1 upsert, as the gateway's
 * index writes are), and `none` (answer only).
 *
 * `POST /turn?c={conversation}[&tool=1]` is the floor of a turn (issue 23): only what any gateway that keeps a
 * conversation durably must do per turn, and none of what this one adds (prompt layers, guards, policy, budgets,
 * audit, the openai SDK, the index). One RPC into the conversation's object; the user's message stored; the model
 * called with the conversation's last 20 messages (`MODEL_URL`, the same offline model the gateway bench uses,
 * one plain JSON answer); for `tool=1` one tool round (the tool is an echo: no I/O) and a second model call; each
 * round's reply stored; then one console line for the turn and one R2 put (the run's record), and the answer.
 * A gateway's turn cannot cost less than this under the same `wrangler dev`, so its figures are the ceiling of
 * the ratios to the peer that this machine can show (docs/benchmarks.md, "The floor").
 */
import { DurableObject } from "cloudflare:workers";

interface BaselineEnv {
  COUNTER: DurableObjectNamespace<BaselineDO>;
  BUCKET: R2Bucket;
  DB: D1Database;
  /** The offline model's base URL (`--var MODEL_URL:…`), for `POST /turn`. */
  MODEL_URL?: string;
}

/** A chat message as the model gets it. */
interface ChatMessage {
  role: string;
  content: string | null;
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/** The one tool the floor offers (the offline model calls it for "list files"); its result is an echo. */
const FLOOR_TOOLS = [
  {
    type: "function",
    function: {
      name: "fs__list_dir",
      description: "List a directory.",
      parameters: { type: "object", properties: { path: { type: "string" } } },
    },
  },
];

export class BaselineDO extends DurableObject<BaselineEnv> {
  constructor(ctx: DurableObjectState, env: BaselineEnv) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS hits (seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL, ts TEXT NOT NULL)");
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, message TEXT NOT NULL, ts TEXT NOT NULL)",
    );
  }

  /** The floor of a turn (see the module comment): returns the reply and the model calls made. */
  async turn(text: string, modelUrl: string): Promise<{ reply: string; calls: number }> {
    this.#store({ role: "user", content: text });
    for (let calls = 1; ; calls++) {
      const history = this.ctx.storage.sql
        .exec<{ message: string }>("SELECT message FROM messages ORDER BY seq DESC LIMIT 20")
        .toArray()
        .reverse()
        .map((r) => JSON.parse(r.message) as ChatMessage);
      while (history[0]?.role === "tool") history.shift(); // a window never starts inside a tool round
      const res = await fetch(`${modelUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "sophie-local",
          messages: [{ role: "system", content: "You are a bench agent." }, ...history],
          tools: FLOOR_TOOLS,
        }),
      });
      const answer = (await res.json()) as { choices?: { message: ChatMessage }[] };
      const message = answer.choices?.[0]?.message;
      if (!message) throw new Error(`the model answered ${res.status} without a choice`);
      const call = message.tool_calls?.[0];
      if (!call || calls >= 4) {
        this.#store({ role: "assistant", content: message.content ?? "" });
        return { reply: message.content ?? "", calls };
      }
      const output = { path: ".", entries: [] as string[] };
      this.ctx.storage.transactionSync(() => {
        this.#store({ role: "assistant", content: null, tool_calls: [call] });
        this.#store({
          role: "tool",
          tool_call_id: call.id,
          content: JSON.stringify({ id: call.id, tool: "fs.list_dir", ok: true, output }),
        });
      });
    }
  }

  #store(message: ChatMessage): void {
    this.ctx.storage.sql.exec("INSERT INTO messages (message, ts) VALUES (?, ?)", JSON.stringify(message), new Date().toISOString());
  }

  /** One SQLite write; returns the new row's sequence number. */
  record(body: string): number {
    const row = this.ctx.storage.sql
      .exec<{ seq: number }>("INSERT INTO hits (body, ts) VALUES (?, ?) RETURNING seq", body, new Date().toISOString())
      .one();
    return row.seq;
  }

  /** An RPC round trip that touches nothing. */
  ping(): number {
    return 1;
  }

  /** One alarm write (the alarm itself is due in an hour and is replaced by the next call). */
  async arm(): Promise<number> {
    await this.ctx.storage.setAlarm(Date.now() + 3_600_000);
    return 1;
  }

  override async alarm(): Promise<void> {}
}

/** The D1 table, created once per isolate (by the first `d1` request). */
let d1Ready: Promise<unknown> | undefined;

/** The unit operations `POST /cost/{op}` performs, one per request. */
const COSTS: Record<string, (env: BaselineEnv, conversation: string, body: string) => Promise<unknown>> = {
  none: async () => 0,
  rpc: (env, c) => env.COUNTER.getByName(c).ping(),
  sql: (env, c, body) => env.COUNTER.getByName(c).record(body),
  alarm: (env, c) => env.COUNTER.getByName(c).arm(),
  r2: (env, c, body) => env.BUCKET.put(`cost/${c}/${crypto.randomUUID()}.json`, body),
  d1: async (env, c, body) => {
    d1Ready ??= env.DB.prepare("CREATE TABLE IF NOT EXISTS hits (id TEXT PRIMARY KEY, body TEXT NOT NULL, n INTEGER NOT NULL)").run();
    await d1Ready;
    await env.DB.prepare("INSERT INTO hits (id, body, n) VALUES (?1, ?2, 1) ON CONFLICT (id) DO UPDATE SET n = n + 1, body = excluded.body")
      .bind(c, body)
      .run();
  },
  log: async (_env, c, body) => {
    console.log(JSON.stringify({ level: "info", event: "bench.cost", conversation: c, ts: new Date().toISOString(), body }));
  },
};

/** `POST /turn`: the floor of a turn (module comment); one console line and one R2 put per turn. */
async function floorTurn(request: Request, env: BaselineEnv, url: URL): Promise<Response> {
  if (!env.MODEL_URL) return Response.json({ error: "MODEL_URL is not set" }, { status: 500 });
  const conversation = url.searchParams.get("c") ?? "default";
  const { message } = (await request.json()) as { message: string };
  const started = Date.now();
  const turn = await env.COUNTER.getByName(`turn-${conversation}`).turn(message, env.MODEL_URL);
  const runId = crypto.randomUUID();
  const record = { run_id: runId, conversation, model_calls: turn.calls, ms: Date.now() - started };
  console.log(JSON.stringify({ ts: new Date().toISOString(), level: "info", event: "bench.turn", ...record }));
  await env.BUCKET.put(`turns/${conversation}/${runId}.json`, JSON.stringify({ ...record, reply: turn.reply }));
  return Response.json({ run_id: runId, reply: turn.reply, model_calls: turn.calls });
}

export default {
  async fetch(request: Request, env: BaselineEnv): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/healthz") return Response.json({ ok: true });
    if (url.pathname === "/turn" && request.method === "POST") return floorTurn(request, env, url);
    const cost = url.pathname.startsWith("/cost/") ? COSTS[url.pathname.slice("/cost/".length)] : undefined;
    if (cost && request.method === "POST") {
      await cost(env, url.searchParams.get("c") ?? "default", await request.text());
      return Response.json({ ok: true });
    }
    if (url.pathname !== "/write" || request.method !== "POST") return Response.json({ error: "not_found" }, { status: 404 });
    const conversation = url.searchParams.get("c") ?? "default";
    const body = await request.text();
    const seq = await env.COUNTER.getByName(conversation).record(body);
    const key = `hits/${conversation}/${String(seq).padStart(10, "0")}.json`;
    await env.BUCKET.put(key, body, { httpMetadata: { contentType: "application/json" } });
    return Response.json({ ok: true, seq, key });
  },
} satisfies ExportedHandler<BaselineEnv>;

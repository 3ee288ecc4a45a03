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
 */
import { DurableObject } from "cloudflare:workers";

interface BaselineEnv {
  COUNTER: DurableObjectNamespace<BaselineDO>;
  BUCKET: R2Bucket;
  DB: D1Database;
}

export class BaselineDO extends DurableObject<BaselineEnv> {
  constructor(ctx: DurableObjectState, env: BaselineEnv) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS hits (seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL, ts TEXT NOT NULL)");
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

export default {
  async fetch(request: Request, env: BaselineEnv): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/healthz") return Response.json({ ok: true });
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

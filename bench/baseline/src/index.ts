/**
 * The bench baseline Worker: per request, exactly one Durable Object SQLite
 * write (an INSERT in the object's own storage) and one R2 put, then a small
 * JSON answer. Every gateway route that records anything does at least this,
 * so its throughput and latency under `wrangler dev` are the floor the
 * gateway's figures are divided by (docs/benchmarks.md). `GET /healthz`
 * answers without touching storage (readiness only).
 */
import { DurableObject } from "cloudflare:workers";

interface BaselineEnv {
  COUNTER: DurableObjectNamespace<BaselineDO>;
  BUCKET: R2Bucket;
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
}

export default {
  async fetch(request: Request, env: BaselineEnv): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname === "/healthz") return Response.json({ ok: true });
    if (url.pathname !== "/write" || request.method !== "POST") return Response.json({ error: "not_found" }, { status: 404 });
    const conversation = url.searchParams.get("c") ?? "default";
    const body = await request.text();
    const seq = await env.COUNTER.getByName(conversation).record(body);
    const key = `hits/${conversation}/${String(seq).padStart(10, "0")}.json`;
    await env.BUCKET.put(key, body, { httpMetadata: { contentType: "application/json" } });
    return Response.json({ ok: true, seq, key });
  },
} satisfies ExportedHandler<BaselineEnv>;

/**
 * The audit log's read side (DESIGN §3):
 *   GET /api/admin/audit?agent_id=…&date=YYYY-MM-DD          that day's audit events as JSONL, in order
 *   GET /api/admin/audit/verify?agent_id=…&date=YYYY-MM-DD   walks the day's hash chains; the first broken or missing link
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import { auditPrefix, type StreamHead, segmentEvents, verifySegments } from "../../audit/segments";
import { auditStreams } from "../../audit/streams";
import { AGENT_ID } from "../../sessions/keys";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";

const Query = z.object({
  agent_id: z.string().regex(AGENT_ID, "an agent id"),
  date: z.iso.date("a date as YYYY-MM-DD"),
});

const readRoute = createRoute({
  method: "get",
  path: "/audit",
  summary: "One agent's audit events of one day, as JSONL in order",
  request: { query: Query },
  responses: {
    200: { description: "JSONL, one S3 §3 audit event per line", content: { "application/x-ndjson": { schema: z.string() } } },
    400: { description: "Invalid query", content: { "application/json": { schema: ErrorEnvelope } } },
    401: { description: "Missing or invalid token", content: { "application/json": { schema: ErrorEnvelope } } },
  },
});

const verifyRoute = createRoute({
  method: "get",
  path: "/audit/verify",
  summary: "Verify one agent's audit hash chains for one day",
  request: { query: Query },
  responses: {
    200: {
      description: "ok, or the first broken or missing link",
      content: {
        "application/json": {
          schema: z.object({
            ok: z.boolean(),
            segments: z.int().optional(),
            events: z.int().optional(),
            streams: z.int().optional(),
            first_problem: z.object({ stream: z.string(), key: z.string().nullable(), problem: z.string() }).optional(),
          }),
        },
      },
    },
    400: { description: "Invalid query", content: { "application/json": { schema: ErrorEnvelope } } },
    401: { description: "Missing or invalid token", content: { "application/json": { schema: ErrorEnvelope } } },
  },
});

/** Every object key under a prefix, in key order (R2 lists in UTF-8 order). */
async function listKeys(bucket: R2Bucket, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ prefix, ...(cursor ? { cursor } : {}) });
    keys.push(...page.objects.map((o) => o.key));
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return keys;
}

export function adminAuditRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(readRoute, async (c) => {
    const { agent_id, date } = c.req.valid("query");
    const keys = await listKeys(c.env.AUDIT, auditPrefix(agent_id, date));
    const bucket = c.env.AUDIT;
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const key = keys.shift();
        if (key === undefined) return controller.close();
        const object = await bucket.get(key);
        if (object) for (const e of segmentEvents(await object.text())) controller.enqueue(encoder.encode(`${JSON.stringify(e)}\n`));
      },
    });
    return new Response(body, { headers: { "content-type": "application/x-ndjson" } }) as never;
  });

  app.openapi(verifyRoute, async (c) => {
    const { agent_id, date } = c.req.valid("query");
    const seen = await listKeys(c.env.AUDIT, auditPrefix(agent_id, date));
    // Each stream's own record of its chain head shows a removed tail; the D1 index shows a stream removed whole.
    const streams = new Set(await auditStreams(c.env.DB, agent_id, date).catch(() => [] as string[]));
    for (const key of seen) {
      const m = /-([0-9a-f]{64})-\d{6}\.jsonl$/.exec(key);
      if (m?.[1]) streams.add(m[1]);
    }
    const heads = new Map<string, StreamHead>();
    for (const stream of streams) {
      try {
        heads.set(stream, await c.env.SESSIONS.get(c.env.SESSIONS.idFromString(stream)).auditHead(date));
      } catch {
        /* not a stream of this namespace: the chain check still runs */
      }
    }
    // Listed again after the heads were read, so every segment a head counts is in the list (a stream flushing
    // meanwhile adds segments past its head, which verifySegments accepts): no false break from that race.
    const keys = await listKeys(c.env.AUDIT, auditPrefix(agent_id, date));
    const segments: { key: string; body: string }[] = [];
    for (const key of keys) {
      const object = await c.env.AUDIT.get(key);
      if (object) segments.push({ key, body: await object.text() });
    }
    const result = await verifySegments(segments, heads);
    if (result.ok) return c.json({ ok: true, segments: result.segments, events: result.events, streams: result.streams }, 200);
    return c.json({ ok: false, first_problem: result.first }, 200);
  });

  return app;
}

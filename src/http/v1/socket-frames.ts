/**
 * The OpenAPI schema of the frames the WebSocket conversation route's server sends (`GET /v1/chat/socket`,
 * docs/api.md "WebSocket conversations", docs/decisions.md D-053). The frame format itself — the client frame's
 * schema, the server frames' type, parsing and the error frame — belongs to the session's Durable Object that
 * speaks it (src/sessions/socket-frames.ts); this is its documentation, held to that type by the type checker.
 */
import { z } from "@hono/zod-openapi";
import type { SocketServerFrame as SentFrame } from "../../sessions/socket-frames";
import { RunSchema } from "../run-schemas";

const ErrorBody = z.object({ code: z.string(), message: z.string(), retry_after_seconds: z.number().int().optional() });

/** Every frame the server sends. `id` is the client message id the frame answers (absent: the frame had none). */
export const SocketServerFrame = z
  .discriminatedUnion("type", [
    z.object({
      type: z.literal("accepted"),
      id: z.string(),
      run_id: z.string(),
      session_id: z.string(),
      duplicate: z.boolean(),
    }),
    z.object({
      type: z.literal("event"),
      id: z.string(),
      event: z
        .object({
          event_id: z.string(),
          event_type: z.string(),
          ts: z.string(),
          run_id: z.string(),
          agent_id: z.string(),
          seq: z.number().int(),
          payload: z.record(z.string(), z.unknown()),
        })
        .openapi({ description: "The run event exactly as `GET /v1/runs/{run_id}/events` sends it as SSE `data`" }),
    }),
    z.object({ type: z.literal("delta"), id: z.string(), run_id: z.string(), offset: z.number().int(), text: z.string() }).openapi({
      description:
        "Answer text released by the output guard (a message sent with `stream: true`); `offset` is where it starts in the text streamed so far. The last comes right before the terminal event",
    }),
    z.object({ type: z.literal("run"), id: z.string(), run: RunSchema }),
    z.object({ type: z.literal("response"), id: z.string(), response: z.string(), session_id: z.string() }),
    z.object({ type: z.literal("error"), id: z.string().optional(), error: ErrorBody }),
  ])
  .openapi("SocketServerFrame");

// The frames documented here are the frames the object sends, field for field (but the run's `status`: an enum here,
// a plain string in the run's view).
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type Documented = z.infer<typeof SocketServerFrame>;
type DocumentedRun = Extract<Documented, { type: "run" }>;
type SentRun = Extract<SentFrame, { type: "run" }>;
type Holds<T extends readonly true[]> = T;
export type SocketFramesDocumented = Holds<
  [
    Same<Exclude<Documented, { type: "run" }>, Exclude<SentFrame, { type: "run" }>>,
    Same<Omit<DocumentedRun, "run">, Omit<SentRun, "run">>,
    Same<Omit<DocumentedRun["run"], "status">, Omit<SentRun["run"], "status">>,
  ]
>;

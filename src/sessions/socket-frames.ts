/**
 * The frames of the WebSocket conversation route (`GET /v1/chat/socket`, docs/api.md "WebSocket conversations",
 * docs/decisions.md D-053), as the session's Durable Object speaks them: JSON text frames, one object each.
 *
 * Client → server: `message` (a turn, named by the client's own id, which makes it idempotent); the object parses
 * it with `SocketMessageFrame`, the schema the OpenAPI document lists too.
 * Server → client: `accepted` (the run the message queued), `event` (one run event, the object the SSE stream
 * carries as `data`), `delta` (released answer text, for a message sent with `stream: true`), `run` (after the terminal event: the run as `GET /v1/runs/{run_id}` answers it, with the
 * reply), `response` (`/new`, `/resume`), `error` (the S3 error envelope, with the frame's id). Their OpenAPI
 * schema is src/http/v1/socket-frames.ts, which the type checker holds to `SocketServerFrame` here.
 */
import { z } from "@hono/zod-openapi";
import type { ZodError } from "zod";
import { GatewayError, invalidRequestFromZod } from "../errors";
import type { RunView } from "../runs/view";

/** The subprotocol of this frame format; a browser passes its token in a second one (`bearer.<base64url>`). */
export const SOCKET_PROTOCOL = "sophie.v1";

/** A client message id: names the message, so a resent id re-attaches to the run it queued instead of queueing another. */
const MESSAGE_ID = /^[A-Za-z0-9._:@=+-]{1,64}$/;

/** A turn: the user's text, under the client's id for it. */
export const SocketMessageFrame = z
  .strictObject({
    type: z.literal("message"),
    id: z.string().regex(MESSAGE_ID, "1-64 characters of letters, digits and . _ : @ = + -"),
    text: z.string().min(1).max(100_000),
    stream: z
      .boolean()
      .optional()
      .openapi({ description: "Also send the answer's text in `delta` frames as the output guard releases it (default false)" }),
  })
  .openapi("SocketMessageFrame");
export type SocketMessageFrame = z.infer<typeof SocketMessageFrame>;

/** A run event as the `event` frame carries it: the object `GET /v1/runs/{run_id}/events` sends as SSE `data`. */
export interface SocketRunEvent {
  event_id: string;
  event_type: string;
  ts: string;
  run_id: string;
  agent_id: string;
  seq: number;
  payload: Record<string, unknown>;
}

/** The S3 error envelope's body, as the `error` frame carries it. */
export interface SocketErrorBody {
  code: string;
  message: string;
  retry_after_seconds?: number;
}

/** Every frame the server sends. `id` is the client message id the frame answers (absent: the frame had none). */
export type SocketServerFrame =
  | { type: "accepted"; id: string; run_id: string; session_id: string; duplicate: boolean }
  | { type: "event"; id: string; event: SocketRunEvent }
  | { type: "delta"; id: string; run_id: string; offset: number; text: string }
  | { type: "run"; id: string; run: RunView }
  | { type: "response"; id: string; response: string; session_id: string }
  | { type: "error"; id?: string; error: SocketErrorBody };

/** A client frame as received: its `message`, or `invalid.request` naming what is wrong (with the id when it was readable). */
export function parseClientFrame(
  data: string | ArrayBuffer,
): { ok: true; frame: SocketMessageFrame } | { ok: false; id?: string; error: GatewayError } {
  if (typeof data !== "string") return { ok: false, error: new GatewayError("invalid.request", "frames are JSON text, not binary") };
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    return { ok: false, error: new GatewayError("invalid.request", "a frame must be one JSON object") };
  }
  const id = readableId(json);
  const parsed = SocketMessageFrame.safeParse(json);
  if (parsed.success) return { ok: true, frame: parsed.data };
  const error = invalidRequestFromZod(parsed.error as unknown as ZodError, "frame", json);
  return id === undefined ? { ok: false, error } : { ok: false, id, error };
}

/** The error frame of `error`, answering the frame `id` when known. */
export function errorFrame(error: GatewayError, id?: string): SocketServerFrame {
  const { error: body } = error.toEnvelope();
  const wire = {
    code: body.code,
    message: body.message,
    ...(body.retry_after_seconds !== undefined ? { retry_after_seconds: body.retry_after_seconds } : {}),
  };
  return id === undefined ? { type: "error", error: wire } : { type: "error", id, error: wire };
}

function readableId(json: unknown): string | undefined {
  if (json === null || typeof json !== "object" || !("id" in json)) return undefined;
  const id = (json as { id: unknown }).id;
  return typeof id === "string" && MESSAGE_ID.test(id) ? id : undefined;
}

/**
 * The frames of the WebSocket conversation route (`GET /v1/chat/socket`, docs/api.md "WebSocket conversations",
 * docs/decisions.md D-053): JSON text frames, one object each. The schemas are the wire contract — the session's
 * Durable Object parses client frames with them, and the OpenAPI document lists them as components.
 *
 * Client → server: `message` (a turn, named by the client's own id, which makes it idempotent).
 * Server → client: `accepted` (the run the message queued), `event` (one run event, the object the SSE stream
 * carries as `data`), `run` (after the terminal event: the run as `GET /v1/runs/{run_id}` answers it, with the
 * reply), `response` (`/new`, `/resume`), `error` (the S3 error envelope, with the frame's id).
 */
import { z } from "@hono/zod-openapi";
import type { ZodError } from "zod";
import { GatewayError } from "../../errors";
import { invalidRequestFromZod } from "../router";
import { RunSchema } from "../run-schemas";

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
  })
  .openapi("SocketMessageFrame");
export type SocketMessageFrame = z.infer<typeof SocketMessageFrame>;

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
    z.object({ type: z.literal("run"), id: z.string(), run: RunSchema }),
    z.object({ type: z.literal("response"), id: z.string(), response: z.string(), session_id: z.string() }),
    z.object({ type: z.literal("error"), id: z.string().optional(), error: ErrorBody }),
  ])
  .openapi("SocketServerFrame");
export type SocketServerFrame = z.infer<typeof SocketServerFrame>;
/** The run as the `run` frame carries it (GET /v1/runs/{run_id}'s shape). */
export type SocketRunView = z.infer<typeof RunSchema>;

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

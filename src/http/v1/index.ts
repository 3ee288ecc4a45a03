/**
 * The API for API callers, under `/v1` (S3 §5): chat messages, runs, the OpenAI-compatible front door, the
 * WebSocket conversation route, and the `v1` secret of a completion webhook endpoint (D-089).
 * Each route checks `requireScope("api")` itself rather than the mount: S5 fixes a sandbox's tool-callback path
 * under `/v1/sessions/{id}/tools/…` (src/http/webhooks/tool-callbacks.ts), so `/v1` is not the api callers' alone.
 */
import type { OpenAPIHono } from "@hono/zod-openapi";
import type { Door } from "../callers";
import { type AppEnv, createRouter } from "../router";
import { webhookSecretRoutes } from "../webhook-secret";
import { chatRoutes } from "./chat";
import { openAiRoutes } from "./openai";
import { runRoutes } from "./runs";
import { socketRoutes } from "./socket";

/** Where the API is mounted and who calls it. */
export const V1_DOOR: Door = { prefix: "/v1", credential: "api" };

/** Every /v1 route group, paths relative to `V1_DOOR.prefix`. */
export function v1Routes(): OpenAPIHono<AppEnv> {
  const v1 = createRouter();
  v1.route("/", chatRoutes());
  v1.route("/", runRoutes());
  v1.route("/", openAiRoutes());
  v1.route("/", socketRoutes());
  v1.route("/", webhookSecretRoutes("api"));
  return v1;
}

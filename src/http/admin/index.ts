/**
 * The admin API: every `/api/admin/…` route, for the operator holding `GATEWAY_ADMIN_TOKEN` (the dashboard's
 * calls among them, src/dashboard/api-routes.ts). Mounted once, at `/api/admin`, behind one `requireScope("admin")`
 * (`ADMIN_DOOR`, src/http/callers.ts): the route files here declare their paths relative to that prefix and carry
 * no credential check of their own; the OpenAPI document marks their operations from the same door.
 */
import type { OpenAPIHono } from "@hono/zod-openapi";
import type { Door } from "../callers";
import { requireScope } from "../middleware/auth";
import { type AppEnv, createRouter } from "../router";
import { webhookSecretRoutes } from "../webhook-secret";
import { adminApprovalRoutes } from "./approvals";
import { adminAuditRoutes } from "./audit";
import { adminChannelSenderRoutes } from "./channel-senders";
import { adminConfigRoutes } from "./config";
import { adminEnvRequestRoutes } from "./env-requests";
import { adminJobRoutes } from "./jobs";
import { adminKeyRoutes } from "./keys";
import { adminRunRoutes } from "./runs";
import { adminSandboxBootstrapRoutes } from "./sandbox-bootstrap";
import { adminSandboxTokenRoutes } from "./sandbox-tokens";
import { adminSessionRoutes } from "./sessions";
import { adminSetupRoutes } from "./setup";
import { adminSnapshotRoutes } from "./snapshots";
import { adminSystemPromptRoutes } from "./system-prompt";
import { adminUsageRoutes } from "./usage";

/** Where the admin API is mounted and what admits a caller there: the admin token, checked once for every route. */
export const ADMIN_DOOR: Door = { prefix: "/api/admin", credential: "admin", guard: requireScope("admin") };

/** Every admin route group, paths relative to `ADMIN_DOOR.prefix`. */
export function adminRoutes(): OpenAPIHono<AppEnv> {
  const admin = createRouter();
  admin.route("/", adminRunRoutes());
  admin.route("/", adminApprovalRoutes());
  admin.route("/", adminAuditRoutes());
  admin.route("/", adminConfigRoutes());
  admin.route("/", adminJobRoutes());
  admin.route("/", adminSessionRoutes());
  admin.route("/", adminSandboxBootstrapRoutes());
  admin.route("/", adminEnvRequestRoutes());
  admin.route("/", adminSnapshotRoutes());
  admin.route("/", adminSetupRoutes());
  admin.route("/", adminSystemPromptRoutes());
  admin.route("/", adminSandboxTokenRoutes());
  admin.route("/", adminChannelSenderRoutes());
  admin.route("/", adminKeyRoutes());
  admin.route("/", adminUsageRoutes());
  admin.route("/", webhookSecretRoutes("admin"));
  return admin;
}

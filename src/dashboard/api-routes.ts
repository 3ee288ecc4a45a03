/**
 * Every gateway route the browser code calls, as OpenAPI method + path templates. The client builds its URLs only
 * from these (src/dashboard/client/api.mts fills the `{…}` parameters), and test/dashboard/dashboard.test.ts checks each one
 * against /openapi.json — and that the bundled script names no other `/api/…` path.
 */
export const ADMIN_API = {
  status: { method: "GET", path: "/api/admin/status" },
  runs: { method: "GET", path: "/api/admin/runs" },
  run: { method: "GET", path: "/api/admin/runs/{run_id}" },
  usage: { method: "GET", path: "/api/admin/usage" },
  sessions: { method: "GET", path: "/api/admin/chat/sessions" },
  messages: { method: "GET", path: "/api/admin/chat/sessions/{session_id}/messages" },
  generations: { method: "GET", path: "/api/admin/chat/generations" },
  approvals: { method: "GET", path: "/api/admin/approvals" },
  approval: { method: "GET", path: "/api/admin/approvals/{approval_id}" },
  decide: { method: "POST", path: "/api/admin/approvals/{approval_id}" },
  pairings: { method: "GET", path: "/api/admin/channels/pairings" },
  approvePairing: { method: "POST", path: "/api/admin/channels/pairings/{code}/approve" },
  jobs: { method: "GET", path: "/api/admin/jobs" },
  createJob: { method: "POST", path: "/api/admin/jobs" },
  job: { method: "GET", path: "/api/admin/jobs/{job_id}" },
  replaceJob: { method: "PUT", path: "/api/admin/jobs/{job_id}" },
  audit: { method: "GET", path: "/api/admin/audit" },
  auditVerify: { method: "GET", path: "/api/admin/audit/verify" },
  config: { method: "GET", path: "/api/admin/config" },
  configVersions: { method: "GET", path: "/api/admin/config/versions" },
  saveConfig: { method: "POST", path: "/api/admin/config" },
  secrets: { method: "GET", path: "/api/admin/secrets" },
  putSecret: { method: "POST", path: "/api/admin/secrets" },
  deleteSecret: { method: "DELETE", path: "/api/admin/secrets/{name}" },
  envRequests: { method: "GET", path: "/api/admin/env-requests" },
  submitEnvValues: { method: "POST", path: "/api/admin/env-requests/{request_id}/values" },
  keys: { method: "GET", path: "/api/admin/keys" },
  createKey: { method: "POST", path: "/api/admin/keys" },
  rotateKey: { method: "POST", path: "/api/admin/keys/{key_id}/rotate" },
  updateKey: { method: "PATCH", path: "/api/admin/keys/{key_id}" },
  revokeKey: { method: "DELETE", path: "/api/admin/keys/{key_id}" },
} as const satisfies Record<string, ApiRoute>;

/** The one document the API reference page reads (it sends "try it" requests to the operations it lists). */
export const DOCS_API = { openapi: { method: "GET", path: "/openapi.json" } } as const satisfies Record<string, ApiRoute>;

/** A route the browser code calls. */
export interface ApiRoute {
  readonly method: "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
  readonly path: string;
}

/** Where the browser keeps each page's bearer token (sessionStorage: this tab only, gone when it closes). */
export const TOKEN_KEYS = { admin: "sophie.admin.token", docs: "sophie.docs.token" } as const;

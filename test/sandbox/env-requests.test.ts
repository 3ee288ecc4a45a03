/**
 * Issue 21 §2: environment requests can be fulfilled. A setup run whose model calls `request_env_variables`
 * leaves an open request that admins list; an admin submits the values (stored encrypted, S5's per-key
 * `persist`); the request becomes `fulfilled`. The setup session continues with a next message: that run is told
 * the key NAMES inside L6, the sandbox bootstrap's `env` carries the values, and the values appear in no
 * provider request, transcript, run view, R2 object, log line or Durable Object row.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { runObjectId } from "../../src/runs/ids";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, type App, call, until } from "../support/runs";
import { auditBacklog } from "../support/session";

const S5 = ["verify", "save_snapshot", "automation.complete", "save_service_commands", "save_env_files", "request_env_variables"];
const DB_URL = "postgres://app:canary-db-pass-7f3a91@db.example/app";
const MODE = "canary-mode-9c1e55";
const REQUESTED = [
  { key: "DATABASE_URL", type: "secret", required: true, description: "The app database" },
  { key: "APP_MODE", type: "env" },
];
const askForEnv = { tool_calls: [{ id: "env1", name: "request_env_variables", arguments: JSON.stringify({ keys: REQUESTED }) }] };
const ENV_NOTE =
  "=== ENVIRONMENT_AVAILABLE ===\nThese environment variables you requested were supplied and are set in the sandbox environment: " +
  "DATABASE_URL, APP_MODE. Their values are not shown here; read them from the environment (e.g. $NAME) in the sandbox, never ask " +
  "for them in chat.\n=== END_ENVIRONMENT_AVAILABLE ===";

const lines: string[] = [];
afterEach(() => vi.restoreAllMocks());

function captureLogs(): void {
  lines.length = 0;
  for (const level of ["log", "warn", "error", "info", "debug"] as const)
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
      lines.push(args.map(String).join(" "));
    });
}

/** An app whose own logger logs everything (so a value logged by a route would be seen). */
function gateway(host: string, agentId: string): App {
  return createApp({ config: runConfig(host, { agentId, agent: { tools: { allow: S5 } } }), logger: createLogger("debug") });
}

async function adminRun(app: App, id: string): Promise<any> {
  let run: any;
  await until(async () => {
    run = (await call(app, "GET", `/api/admin/runs/${id}`, undefined, ADMIN)).body.run;
    return run.status === "completed" || run.status === "failed";
  });
  return run;
}

/** Starts (or, with `sessionId`, continues) an admin setup session and waits for its run. */
async function setupMessage(app: App, agentId: string, message: string, sessionId?: string) {
  const res = await call(
    app,
    "POST",
    "/api/admin/setup-sessions",
    { agent_id: agentId, message, ...(sessionId ? { session_id: sessionId } : {}) },
    ADMIN,
  );
  expect(res.status).toBe(202);
  const run = await adminRun(app, res.body.id);
  expect(run.status).toBe("completed");
  return res.body as { id: string; session_key: string; session_id: string };
}

async function everyObject(bucket: R2Bucket): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ ...(cursor ? { cursor } : {}) });
    for (const o of page.objects) out.push(`${o.key} ${(await (await bucket.get(o.key))?.text()) ?? ""}`);
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return out;
}

describe("ISSUE21-2 environment requests can be fulfilled", () => {
  it("ISSUE21-2 request → admin list (open) → submit → fulfilled; the continued setup session gets the key names, the bootstrap env the values, nothing else the values", async () => {
    captureLogs();
    const host = uniqueHost("script");
    const agentId = `envreq-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [askForEnv, { content: "I asked for DATABASE_URL and APP_MODE." }, { content: "Connected." }]);
    const app = gateway(host, agentId);

    // 1. The setup run asks.
    const first = await setupMessage(app, agentId, "set up the database");
    const open = await call(app, "GET", `/api/admin/env-requests?session_id=${first.session_id}&status=open`, undefined, ADMIN);
    expect(open.status).toBe(200);
    expect(open.body.next_cursor).toBeNull();
    expect(open.body.env_requests).toHaveLength(1);
    const request = open.body.env_requests[0];
    expect(request).toEqual({
      request_id: expect.stringMatching(/^envreq_[0-9a-f]{24}$/),
      agent_id: agentId,
      session_id: first.session_id,
      run_id: first.id,
      keys: REQUESTED,
      status: "open",
      created_at: expect.any(String),
      fulfilled_at: null,
    });
    // The agent filter finds it too.
    expect(
      (await call(app, "GET", `/api/admin/env-requests?agent_id=${agentId}`, undefined, ADMIN)).body.env_requests.map(
        (r: any) => r.request_id,
      ),
    ).toEqual([request.request_id]);

    // 2. The admin submits: APP_MODE persisted for the agent, DATABASE_URL for this session only.
    const submitted = await call(
      app,
      "POST",
      `/api/admin/env-requests/${request.request_id}/values`,
      {
        values: [
          { key: "DATABASE_URL", value: DB_URL },
          { key: "APP_MODE", value: MODE, persist: true },
        ],
      },
      ADMIN,
    );
    expect(submitted.status).toBe(200);
    expect(submitted.body).toEqual({ ...request, status: "fulfilled", fulfilled_at: expect.any(String) });
    expect(submitted.text).not.toContain(DB_URL);
    expect(
      (await call(app, "GET", `/api/admin/env-requests?session_id=${first.session_id}&status=open`, undefined, ADMIN)).body.env_requests,
    ).toEqual([]);
    const fulfilled = await call(app, "GET", `/api/admin/env-requests?session_id=${first.session_id}&status=fulfilled`, undefined, ADMIN);
    expect(fulfilled.body.env_requests.map((r: any) => [r.request_id, r.status])).toEqual([[request.request_id, "fulfilled"]]);

    // 3. The setup session continues: same session, and its run is told the key names only.
    const next = await setupMessage(app, agentId, "the values are in, connect now", first.session_id);
    expect([next.session_id, next.session_key]).toEqual([first.session_id, first.session_key]);
    const bodies = await bodiesSentTo(host);
    expect(bodies).toHaveLength(3);
    const lastUser = bodies[2]?.messages.filter((m: any) => m.role === "user").at(-1);
    expect(lastUser.content).toBe(`${ENV_NOTE}\n\nthe values are in, connect now`);
    // The first run (before fulfilment) had no such note.
    expect(JSON.stringify(bodies.slice(0, 2))).not.toContain("ENVIRONMENT_AVAILABLE");
    const manifest = (await call(app, "GET", `/api/admin/runs/${next.id}`, undefined, ADMIN)).body.manifests[0].manifest;
    expect(manifest.notes.some((n: string) => n.startsWith("L6 preceded by env_available"))).toBe(true);

    // 4. The sandbox bootstrap carries the values (the session's own, and the agent's persisted one).
    const boot = await call(app, "POST", `/api/admin/sessions/${first.session_id}/sandbox-bootstrap`, {}, ADMIN);
    expect(boot.status).toBe(201);
    expect(boot.body.env).toEqual({
      APP_MODE: MODE,
      DATABASE_URL: DB_URL,
      PROLIFERATE_GATEWAY_URL: "https://gateway.test",
      PROLIFERATE_SESSION_ID: first.session_id,
      SANDBOX_MCP_AUTH_TOKEN: expect.any(String),
    });

    // 5. Nowhere else: provider requests, transcript, run views, R2, logs, the session's Durable Object rows.
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(next.id) as string));
    await until(async () => (await auditBacklog(stub)) === 0);
    const rows = await runInDurableObject(stub, (_i, state: DurableObjectState) =>
      state.storage.sql
        .exec<{ name: string }>(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND substr(name, 1, 4) <> '_cf_'",
        )
        .toArray()
        .map((t) => `${t.name}: ${JSON.stringify(state.storage.sql.exec(`SELECT * FROM "${t.name}"`).toArray())}`),
    );
    const places = [
      JSON.stringify(bodies),
      (await call(app, "GET", `/api/admin/chat/sessions/${first.session_id}/messages`, undefined, ADMIN)).text,
      (await call(app, "GET", `/api/admin/runs/${first.id}`, undefined, ADMIN)).text,
      (await call(app, "GET", `/api/admin/runs/${next.id}`, undefined, ADMIN)).text,
      (await call(app, "GET", `/api/admin/env-requests?agent_id=${agentId}`, undefined, ADMIN)).text,
      ...(await everyObject(env.AUDIT)),
      ...(await everyObject(env.WORKSPACE)),
      ...lines,
      ...rows,
    ];
    expect(lines.some((l) => l.includes('"event":"admin.env_request"') && l.includes("DATABASE_URL"))).toBe(true);
    expect(rows.some((r) => r.startsWith("transcript:"))).toBe(true);
    expect(places.filter((p) => p.includes(DB_URL) || p.includes(MODE) || p.includes("canary-db-pass"))).toEqual([]);
    // D1 holds ciphertext only.
    const stored = await env.DB.prepare("SELECT scope, key, type, iv, ciphertext FROM env_values WHERE request_id = ?1 ORDER BY key")
      .bind(request.request_id)
      .all<{ scope: string; key: string; type: string; ciphertext: string }>();
    expect(stored.results.map((r) => [r.scope, r.key, r.type])).toEqual([
      [`agent:${agentId}`, "APP_MODE", "env"],
      [`session:${first.session_id}`, "DATABASE_URL", "secret"],
    ]);
    expect(JSON.stringify(stored.results)).not.toContain("canary");
  });

  it("ISSUE21-2 persist: a persisted value reaches the agent's other sessions' bootstrap env; a session-only one does not", async () => {
    const host = uniqueHost("script");
    const agentId = `envper-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [askForEnv, { content: "asked" }, { content: "other session" }]);
    const app = gateway(host, agentId);
    const first = await setupMessage(app, agentId, "set up");
    const request = (await call(app, "GET", `/api/admin/env-requests?session_id=${first.session_id}`, undefined, ADMIN)).body
      .env_requests[0];
    const res = await call(
      app,
      "POST",
      `/api/admin/env-requests/${request.request_id}/values`,
      {
        values: [
          { key: "DATABASE_URL", value: DB_URL, persist: false },
          { key: "APP_MODE", value: MODE },
        ],
        save_to_configuration: true,
      },
      ADMIN,
    );
    expect(res.status).toBe(200);
    const other = await setupMessage(app, agentId, "another setup");
    expect(other.session_id).not.toBe(first.session_id);
    const boot = await call(app, "POST", `/api/admin/sessions/${other.session_id}/sandbox-bootstrap`, {}, ADMIN);
    expect(boot.status).toBe(201);
    expect(Object.keys(boot.body.env).sort()).toEqual([
      "APP_MODE",
      "PROLIFERATE_GATEWAY_URL",
      "PROLIFERATE_SESSION_ID",
      "SANDBOX_MCP_AUTH_TOKEN",
    ]);
    expect(boot.body.env.APP_MODE).toBe(MODE);
  });

  it("ISSUE21-2 errors: missing keys → 400 naming them, unrequested key → 400, unknown request → 404, second submit → 409, API token → 403; audited with key names only", async () => {
    const host = uniqueHost("script");
    const agentId = `enverr-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [askForEnv, { content: "asked" }]);
    const app = gateway(host, agentId);
    const first = await setupMessage(app, agentId, "set up");
    const request = (await call(app, "GET", `/api/admin/env-requests?session_id=${first.session_id}`, undefined, ADMIN)).body
      .env_requests[0];
    const path = `/api/admin/env-requests/${request.request_id}/values`;

    const missing = await call(app, "POST", path, { values: [{ key: "APP_MODE", value: MODE }] }, ADMIN);
    expect(missing.status).toBe(400);
    expect(missing.body).toEqual({ error: { code: "invalid.request", message: "missing values for requested keys: DATABASE_URL" } });
    const extra = await call(
      app,
      "POST",
      path,
      {
        values: [
          { key: "DATABASE_URL", value: DB_URL },
          { key: "APP_MODE", value: MODE },
          { key: "OTHER", value: "x" },
        ],
      },
      ADMIN,
    );
    expect(extra.status).toBe(400);
    expect(extra.body).toEqual({ error: { code: "invalid.request", message: `keys not in request ${request.request_id}: OTHER` } });
    expect(extra.text).not.toContain(DB_URL);
    const unknown = await call(
      app,
      "POST",
      "/api/admin/env-requests/envreq_000000000000000000000000/values",
      { values: [{ key: "A", value: "b" }] },
      ADMIN,
    );
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: { code: "resource.not_found", message: "no env request envreq_000000000000000000000000" } });
    const api = await call(app, "POST", path, {
      values: [
        { key: "DATABASE_URL", value: DB_URL },
        { key: "APP_MODE", value: MODE },
      ],
    });
    expect(api.status).toBe(403);
    // Still open after all of these.
    expect(
      (await call(app, "GET", `/api/admin/env-requests?session_id=${first.session_id}&status=open`, undefined, ADMIN)).body.env_requests,
    ).toHaveLength(1);

    const ok = await call(
      app,
      "POST",
      path,
      {
        values: [
          { key: "DATABASE_URL", value: DB_URL },
          { key: "APP_MODE", value: MODE },
        ],
      },
      ADMIN,
    );
    expect(ok.status).toBe(200);
    const again = await call(
      app,
      "POST",
      path,
      {
        values: [
          { key: "DATABASE_URL", value: "other" },
          { key: "APP_MODE", value: "other" },
        ],
      },
      ADMIN,
    );
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: { code: "conflict", message: `env request ${request.request_id} is already fulfilled` } });
    // Audited once in the gateway's stream, key names only.
    const audited = async () => {
      const res = await call(
        app,
        "GET",
        `/api/admin/audit?agent_id=gateway&date=${new Date().toISOString().slice(0, 10)}`,
        undefined,
        ADMIN,
      );
      return res.status === 200
        ? res.text
            .split("\n")
            .filter(Boolean)
            .map((l) => JSON.parse(l))
            .filter((e) => e.event_type === "env_request.fulfilled" && e.payload.request_id === request.request_id)
        : [];
    };
    await until(async () => (await audited()).length === 1, 15_000);
    const [event] = await audited();
    expect(event).toMatchObject({ actor: "admin", agent_id: "gateway", event_type: "env_request.fulfilled" });
    expect(event.payload).toEqual({
      request_id: request.request_id,
      session_id: first.session_id,
      keys: ["DATABASE_URL", "APP_MODE"],
      persisted: [],
    });
    // The first submission's value stands.
    const boot = await call(app, "POST", `/api/admin/sessions/${first.session_id}/sandbox-bootstrap`, {}, ADMIN);
    expect(boot.body.env.DATABASE_URL).toBe(DB_URL);
  });

  it("ISSUE21-2 the list pages like every list (limit, next_cursor, a foreign cursor is 400)", async () => {
    const host = uniqueHost("script");
    const agentId = `envpg-${crypto.randomUUID().slice(0, 8)}`;
    const ask = (id: string) => ({
      tool_calls: [{ id, name: "request_env_variables", arguments: JSON.stringify({ keys: [{ key: `K_${id}` }] }) }],
    });
    await scriptProvider(host, [ask("a"), ask("b"), ask("c"), { content: "asked thrice" }]);
    const app = gateway(host, agentId);
    await setupMessage(app, agentId, "set up");
    const page1 = await call(app, "GET", `/api/admin/env-requests?agent_id=${agentId}&limit=2`, undefined, ADMIN);
    expect(page1.body.env_requests).toHaveLength(2);
    expect(typeof page1.body.next_cursor).toBe("string");
    const page2 = await call(
      app,
      "GET",
      `/api/admin/env-requests?agent_id=${agentId}&limit=2&cursor=${page1.body.next_cursor}`,
      undefined,
      ADMIN,
    );
    expect(page2.body.env_requests).toHaveLength(1);
    expect(page2.body.next_cursor).toBeNull();
    const keys = [...page1.body.env_requests, ...page2.body.env_requests].map((r: any) => r.keys[0].key).sort();
    expect(keys).toEqual(["K_a", "K_b", "K_c"]);
    const runsCursor = (await call(app, "GET", "/api/admin/runs?limit=1", undefined, ADMIN)).body.next_cursor;
    const foreign = await call(app, "GET", `/api/admin/env-requests?cursor=${runsCursor}`, undefined, ADMIN);
    expect(foreign.status).toBe(400);
    expect(foreign.body).toEqual({ error: { code: "invalid.request", message: "cursor is not valid for this list" } });
  });

  it("ISSUE21-2 a setup session can continue: the session_id of an API caller's session → 404", async () => {
    const host = uniqueHost("script");
    const agentId = `envcont-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ content: "one" }, { content: "two" }, { content: "three" }]);
    const app = gateway(host, agentId);
    const chat = await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: "r", agent_id: agentId, message: "hi" });
    expect(chat.status).toBe(202);
    const taken = await call(
      app,
      "POST",
      "/api/admin/setup-sessions",
      { agent_id: agentId, message: "x", session_id: chat.body.session_id },
      ADMIN,
    );
    expect(taken.status).toBe(404);
    expect(taken.body).toEqual({
      error: { code: "resource.not_found", message: `no admin setup session ${chat.body.session_id} of agent "${agentId}"` },
    });
    // An ordinary admin setup session continues in place.
    const setup = await setupMessage(app, agentId, "set up");
    expect((await setupMessage(app, agentId, "and then", setup.session_id)).session_id).toBe(setup.session_id);
  });
});

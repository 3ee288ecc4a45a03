/**
 * S3 §5 `POST /api/admin/config` ("persist validated config") and stored secrets in use (issue 11 item 1):
 * a posted config is validated by the same rules as the bundled file, stored as a new version in D1, in force
 * here at once and on every isolate within ADMIN_REFRESH_MS, and audited; stored secrets are laid over the
 * Worker's env — in the Worker and in the SessionDO — and redacted like every other secret.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { bundledConfig } from "../../src/config/load";
import { parseGatewayConfig } from "../../src/config/parse";
import { bundledConfigSha256, configInForce, forgetConfigInForce, postConfigVersion } from "../../src/config/versions";
import { encodeCursor } from "../../src/http/admin/paging";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { sha256Hex } from "../../src/prompts/hash";
import { forgetStoredSecrets, storableSecretName } from "../../src/security/stored-secrets";
import { ADMIN_REFRESH_MS, forgetAdminGenerations } from "../../src/storage/admin-generation";
import { mockProvider, requestsTo, runConfig, uniqueHost } from "../support/config";
import { ADMIN, ALICE, call, runDetail, until, waitForRun } from "../support/runs";

/** The app as deployed: no fixed config, so it follows the versions in D1. */
const app = createApp({ logger: createLogger("error") });

/** A well-formed run id no run has: 404 for a known caller, 401 for an unknown one. */
const NO_RUN = `/v1/runs/run_${"0".repeat(80)}`;

const today = () => new Date().toISOString().slice(0, 10);

/** The bundled config as a document an admin would post (defaults explicit), with `edit` applied. */
function document(edit: (doc: any) => void = () => {}): any {
  const doc = JSON.parse(JSON.stringify(bundledConfig()));
  edit(doc);
  return doc;
}

async function newest(): Promise<number> {
  return (await env.DB.prepare("SELECT COALESCE(MAX(version), 0) AS v FROM config_versions").first<{ v: number }>())?.v ?? 0;
}

afterEach(async () => {
  // Back to the bundled file for the next test (D1 is shared by this file's tests), and drop the isolate copies.
  await env.DB.batch([env.DB.prepare("DELETE FROM config_versions"), env.DB.prepare("DELETE FROM admin_secrets")]);
  forgetAdminGenerations();
  forgetConfigInForce();
  forgetStoredSecrets();
});

describe("S3 §5 POST /api/admin/config persists a validated config", () => {
  it("POST /api/admin/config: 201 {version, sha256, created_at, actor}; GET shows it at once with ETag the version", async () => {
    const before = await call(app, "GET", "/api/admin/config", undefined, ADMIN);
    expect(before.headers.get("ETag")).toBe('"0"');
    expect(before.body.scheduler.maxFiringsPerTick).toBe(200);

    const doc = document((d) => {
      d.scheduler.maxFiringsPerTick = 123;
    });
    const posted = await call(app, "POST", "/api/admin/config", doc, ADMIN);
    expect(posted.status).toBe(201);
    expect(posted.body).toEqual({
      version: 1,
      sha256: await sha256Hex(JSON.stringify(doc)),
      created_at: expect.any(String),
      actor: "admin",
    });

    const after = await call(app, "GET", "/api/admin/config", undefined, ADMIN);
    expect(after.headers.get("ETag")).toBe('"1"');
    expect(after.body.scheduler.maxFiringsPerTick).toBe(123);
    const status = await call(app, "GET", "/api/admin/status", undefined, ADMIN);
    expect(status.body.config).toEqual({ source: "admin", version: 1, sha256: posted.body.sha256 });

    const second = await call(app, "POST", "/api/admin/config", document(), ADMIN);
    expect(second.body.version).toBe(2);
    const versions = await call(app, "GET", "/api/admin/config/versions", undefined, ADMIN);
    expect(versions.body).toEqual({
      in_force: { source: "admin", version: 2, sha256: second.body.sha256 },
      versions: [
        { version: 2, sha256: second.body.sha256, created_at: second.body.created_at, actor: "admin" },
        { version: 1, sha256: posted.body.sha256, created_at: posted.body.created_at, actor: "admin" },
      ],
      next_cursor: null,
    });
    // Pages (docs/api.md "Lists"): newest first, keyed by version.
    const page1 = await call(app, "GET", "/api/admin/config/versions?limit=1", undefined, ADMIN);
    expect(page1.body.versions.map((v: any) => v.version)).toEqual([2]);
    expect(page1.body.next_cursor).toBe(encodeCursor("config_versions", [2]));
    const page2 = await call(app, "GET", `/api/admin/config/versions?limit=1&cursor=${page1.body.next_cursor}`, undefined, ADMIN);
    expect(page2.body.versions.map((v: any) => v.version)).toEqual([1]);
    expect(page2.body.next_cursor).toBeNull();
    expect((await call(app, "GET", "/api/admin/config/versions?cursor=2", undefined, ADMIN)).body).toEqual({
      error: { code: "invalid.request", message: "cursor is not valid for this list" },
    });
    // A version as posted, to compare or to post again (rollback).
    const v1 = await call(app, "GET", "/api/admin/config/versions/1", undefined, ADMIN);
    expect(v1.body).toEqual(doc);
    expect((await call(app, "GET", "/api/admin/config/versions/9", undefined, ADMIN)).body).toEqual({
      error: { code: "resource.not_found", message: "no config version 9" },
    });
  });

  it("POST /api/admin/config refuses an invalid config with every issue and its path; nothing is stored", async () => {
    const bad = document((d) => {
      d.models.default = "moonshot:no-such-model";
      d.bogus = true;
      d.agents.gateway = {};
    });
    const res = await call(app, "POST", "/api/admin/config", bad, ADMIN);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      error: {
        code: "invalid.request",
        message: `config is invalid: agents.gateway: "gateway" is reserved: the gateway's own audit stream (admin changes) has that id (and 1 more)`,
        issues: [
          { path: "agents.gateway", message: `"gateway" is reserved: the gateway's own audit stream (admin changes) has that id` },
          { path: "bogus", message: "unknown key (configuration is strict: unknown keys are rejected)" },
        ],
      },
    });
    // Cross-references are checked once the schema passes.
    const unknownModel = await call(
      app,
      "POST",
      "/api/admin/config",
      document((d) => (d.models.default = "moonshot:no-such-model")),
      ADMIN,
    );
    expect(unknownModel.body.error.issues).toEqual([{ path: "models.default", message: expect.stringContaining("no-such-model") }]);
    // A credential-shaped value is refused like in the bundled file, and never echoed.
    const secret = "sk-abcdefghijklmnopqrstuvwxyz0123456789";
    const leaky = await call(
      app,
      "POST",
      "/api/admin/config",
      document((d) => (d.agents.main.description = secret)),
      ADMIN,
    );
    expect(leaky.status).toBe(400);
    expect(leaky.body.error.issues[0].path).toBe("agents.main.description");
    expect(leaky.text).not.toContain(secret);
    // Not an object at all: the route's own validation.
    expect((await call(app, "POST", "/api/admin/config", [1], ADMIN)).status).toBe(400);
    expect(await newest()).toBe(0);
    expect((await call(app, "GET", "/api/admin/config", undefined, ADMIN)).headers.get("ETag")).toBe('"0"');
    // Admin only.
    expect((await call(app, "POST", "/api/admin/config", document(), ALICE)).status).toBe(403);
  });

  it("POST /api/admin/config with If-Match: a stale version is 409 conflict, the current one is accepted", async () => {
    const post = (ifMatch: string) =>
      app.request(
        "https://gateway.test/api/admin/config",
        {
          method: "POST",
          headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json", "If-Match": ifMatch },
          body: JSON.stringify(document()),
        },
        env,
      );
    expect((await post('"0"')).status).toBe(201);
    const stale = await post('"0"');
    expect({ status: stale.status, body: await stale.json() }).toEqual({
      status: 409,
      body: { error: { code: "conflict", message: "config version 1 was posted since version 0; read the config again and retry" } },
    });
    expect((await post('"1"')).status).toBe(201);
    const malformed = await post("1");
    expect(await malformed.json()).toEqual({
      error: { code: "invalid.request", message: 'If-Match must be a config version ETag such as "3"' },
    });
    expect(await newest()).toBe(2);
  });

  it("a config change takes effect on every isolate within ADMIN_REFRESH_MS (5 s), and not before the probe", async () => {
    const t0 = 1_000_000;
    expect((await configInForce(env.DB, t0)).version).toBe(0);
    // Another isolate posts: this one does not forget its copy.
    const r = await postConfigVersion(
      env.DB,
      document((d) => (d.scheduler.maxFiringsPerTick = 7)),
      { actor: "admin", now: new Date() },
    );
    expect(r.ok).toBe(true);
    expect((await configInForce(env.DB, t0 + ADMIN_REFRESH_MS - 1)).version).toBe(0);
    const seen = await configInForce(env.DB, t0 + ADMIN_REFRESH_MS);
    expect({ version: seen.version, source: seen.source, max: seen.config.scheduler.maxFiringsPerTick }).toEqual({
      version: 1,
      source: "admin",
      max: 7,
    });
    expect(ADMIN_REFRESH_MS).toBe(5_000);
  });

  it("a deploy that changes the bundled file supersedes earlier posts; a version that no longer validates is never used", async () => {
    const bundledSha = await bundledConfigSha256();
    const body = JSON.stringify(document((d) => (d.scheduler.maxFiringsPerTick = 9)));
    await env.DB.prepare(
      "INSERT INTO config_versions (version, body, sha256, bundled_sha256, actor, created_at) VALUES (1, ?1, 'x', 'an-older-deploy', 'admin', '2026-01-01T00:00:00.000Z')",
    )
      .bind(body)
      .run();
    const superseded = await configInForce(env.DB);
    expect({ source: superseded.source, version: superseded.version, sha256: superseded.sha256, problem: superseded.problem }).toEqual({
      source: "bundled",
      version: 0,
      sha256: bundledSha,
      problem: "version 1 was posted before the deployed config/gateway.json5 changed; the deploy is newer",
    });
    await env.DB.prepare(
      "INSERT INTO config_versions (version, body, sha256, bundled_sha256, actor, created_at) VALUES (2, ?2, 'y', ?1, 'admin', '2026-01-01T00:00:00.000Z')",
    )
      .bind(bundledSha, JSON.stringify(document((d) => (d.nope = 1))))
      .run();
    forgetAdminGenerations();
    const invalid = await configInForce(env.DB);
    expect({ source: invalid.source, problem: invalid.problem }).toEqual({
      source: "bundled",
      problem: "version 2 no longer validates (1 issue(s), first: nope: unknown key (configuration is strict: unknown keys are rejected))",
    });
    const versions = await call(app, "GET", "/api/admin/config/versions", undefined, ADMIN);
    expect(versions.body.in_force.problem).toBe(invalid.problem);
  });

  it("a run records the config version it was accepted under in run.created (source, version, sha256)", async () => {
    const host = uniqueHost("ok");
    const doc = JSON.parse(JSON.stringify(runConfig(host)));
    // Moving the provider to another origin needs its key stored for that origin first (issue 20 §5).
    const stored = { name: "MOONSHOT_API_KEY", value: env.MOONSHOT_API_KEY, origin: `https://${host}` };
    expect((await call(app, "POST", "/api/admin/secrets", stored, ADMIN)).status).toBe(201);
    const posted = (await call(app, "POST", "/api/admin/config", doc, ADMIN)).body;
    const runId = (await call(app, "POST", "/v1/runs", { agent_id: "main", message: "which config?" })).body.id;
    expect((await waitForRun(app, runId)).status).toBe("completed");
    const created = (await runDetail(app, runId)).events.find((e: any) => e.event_type === "run.created");
    expect(created.payload.config).toEqual({ source: "admin", version: posted.version, sha256: posted.sha256 });
  });

  it("S3 §3: each config change is audited as config.updated (actor admin) in the gateway's own stream — hashes, never content", async () => {
    const posted = (
      await call(
        app,
        "POST",
        "/api/admin/config",
        document((d) => (d.scheduler.maxFiringsPerTick = 77)),
        ADMIN,
      )
    ).body;
    const events = async () => {
      const res = await call(app, "GET", `/api/admin/audit?agent_id=gateway&date=${today()}`, undefined, ADMIN);
      return res.status === 200
        ? res.text
            .split("\n")
            .filter(Boolean)
            .map((l) => JSON.parse(l))
            .filter((e) => e.event_type === "config.updated" && e.payload.sha256 === posted.sha256)
        : [];
    };
    await until(async () => (await events()).length === 1, 15_000);
    const [event] = await events();
    expect(event).toMatchObject({ actor: "admin", agent_id: "gateway", run_id: null, event_type: "config.updated" });
    expect(event.payload).toEqual({ version: posted.version, sha256: posted.sha256, previous: { source: "bundled", version: 0 } });
  }, 30_000);
});

describe("S3 §5 stored secrets are used by the gateway", () => {
  it("only the secrets the gateway reads can be stored; the admin token and the store's key only by deployment", async () => {
    expect(storableSecretName("MOONSHOT_API_KEY")).toBeNull();
    expect(storableSecretName("TELEGRAM_BOT_TOKEN")).toBeNull();
    expect(storableSecretName("GATEWAY_ADMIN_TOKEN")).toBe(
      "GATEWAY_ADMIN_TOKEN can only be set as a Worker secret (wrangler secret put), not through the API",
    );
    for (const [name, message] of [
      ["SECRETS_ENCRYPTION_KEY", "SECRETS_ENCRYPTION_KEY can only be set as a Worker secret (wrangler secret put), not through the API"],
      [
        "DB",
        "DB is not a secret the gateway reads; it reads <PROVIDER>_API_KEY and DISCORD_APPLICATION_ID, DISCORD_BOT_TOKEN, DISCORD_PUBLIC_KEY, GATEWAY_API_TOKENS, SANDBOX_TOKEN_SECRET, SCHEDULER_WEBHOOK_SECRET, SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, STANDARD_WEBHOOK_SECRET, TELEGRAM_BOT_TOKEN, TELEGRAM_WEBHOOK_SECRET",
      ],
    ]) {
      const res = await call(app, "POST", "/api/admin/secrets", { name, value: "some-value-0123456789" }, ADMIN);
      expect(res.body).toEqual({ error: { code: "invalid.request", message } });
    }
    expect((await call(app, "GET", "/api/admin/secrets", undefined, ADMIN)).body.secrets).toEqual([]);
  });

  it("a stored GATEWAY_API_TOKENS is in force for auth at once; deleting it restores the Worker's own tokens", async () => {
    const carol = "test-api-token-carol-0123456789";
    expect((await call(app, "GET", NO_RUN, undefined, carol)).status).toBe(401);
    await call(app, "POST", "/api/admin/secrets", { name: "GATEWAY_API_TOKENS", value: `carol:${carol}` }, ADMIN);
    expect((await call(app, "GET", NO_RUN, undefined, carol)).status).toBe(404);
    expect((await call(app, "GET", NO_RUN, undefined, ALICE)).status).toBe(401);
    await call(app, "DELETE", "/api/admin/secrets/GATEWAY_API_TOKENS", undefined, ADMIN);
    expect((await call(app, "GET", NO_RUN, undefined, carol)).status).toBe(401);
    expect((await call(app, "GET", NO_RUN, undefined, ALICE)).status).toBe(404);
  });

  it("a provider key stored through the API is used by runs in the SessionDO, and redacted wherever it appears", async () => {
    const host = uniqueHost("ok");
    const parsed = parseGatewayConfig({
      models: { default: "acme:kimi-k1-128k", providers: { acme: mockProvider(host) } },
      agents: { main: {} },
    });
    if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
    const fixed = createApp({ config: parsed.value, logger: createLogger("error") });
    const key = `acme-stored-key-${crypto.randomUUID()}`;

    // Without it: the Worker env has no ACME_API_KEY, so the run fails before any network call.
    const before = await call(fixed, "POST", "/v1/runs", { agent_id: "main", message: "hello" });
    const failed = await waitForRun(fixed, before.body.id);
    expect(failed.status).toBe("failed");
    expect(await requestsTo(host)).toEqual([]);

    expect((await call(fixed, "POST", "/api/admin/secrets", { name: "ACME_API_KEY", value: key }, ADMIN)).status).toBe(201);
    const started = await call(fixed, "POST", "/v1/runs", { agent_id: "main", message: `hello again, the key is ${key}` });
    const done = await waitForRun(fixed, started.body.id);
    expect(done.status).toBe("completed");
    expect((await requestsTo(host)).map((r) => r.authorized)).toEqual([true]);
    // The stored value is a secret like any other: not in the run, its transcript or its audit trail.
    const detail = await call(fixed, "GET", `/api/admin/runs/${started.body.id}`, undefined, ADMIN);
    expect(detail.text).not.toContain(key);
    expect(JSON.stringify(done)).not.toContain(key);
  });
});

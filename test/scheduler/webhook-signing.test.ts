/**
 * Issue 33 (D-089): one shared secret no longer signs every webhook. Each outbound webhook — an API caller's
 * completion webhook, a job notification — carries `v1a,` (Ed25519 with the gateway's signing key, checked here with
 * WebCrypto against the JWKS the gateway publishes at /.well-known/jwks.json) beside `v1,` (HMAC with the endpoint's
 * own key, derived per owner and endpoint, read from /v1/webhook-secret or /api/admin/webhook-secret). Signatures are
 * checked at the webhook's own timestamp, so nothing here reads the wall clock.
 */
import { createScheduledController, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { verifyWebhook, webhookKey } from "../../src/channels/standard-webhooks";
import { createLogger } from "../../src/observability/logger";
import { runObjectId } from "../../src/runs/ids";
import { createJob, JobWrite } from "../../src/scheduler/jobs";
import { deliverNotifications, enqueueNotify } from "../../src/scheduler/notify";
import { runSchedulerTick } from "../../src/scheduler/tick";
import { createSql } from "../../src/storage/sql";
import { requestsTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { ReceivedHook } from "../support/outbound";
import { ADMIN, ALICE, type App, appFor, BOB, readResponse, until, waitForRun } from "../support/runs";
import { auditBacklog } from "../support/session";

const NOTIFY = { notify: { maxAttempts: 3, retryBaseMs: 100, timeoutMs: 1000 } };
const CURRENT = JSON.parse(env.GATEWAY_SIGNING_KEY as string) as { kid: string; x: string; d: string };
/** A key retired before the test key: its public half is listed, its private half is only here, to sign "old" messages. */
const RETIRED_PUBLIC = { kty: "OKP", crv: "Ed25519", kid: "test-signing-2029", x: "0W0p3-7D9D2-nP0wP-r7qVu-WypJFmWlL27tjTWpm6Y" };
const RETIRED_D = "y3U9E9szRgnr72rVciNxc9OXFUvVr47wdwmHJSkP6ws";
/** The d of a third key: with the test key's x it is a JWK whose halves do not belong together. */
const OTHER_D = "T9iqqcVWNRdI_28abkcs6PMd_NeZIVtJ17OrcJMi4m4";
const PUBLISHED = (kid: string, x: string) => ({ kty: "OKP", crv: "Ed25519", kid, x, use: "sig", alg: "EdDSA" });

const hookHost = (scenario: string) => `${scenario}-${crypto.randomUUID().slice(0, 8)}.hook.test`;

async function hooksAt(h: string): Promise<ReceivedHook[]> {
  return (await fetch(`https://mock.control/hooks?host=${h}`)).json();
}

async function setup(steps: Parameters<typeof scriptProvider>[1]) {
  const host = uniqueHost("script");
  await scriptProvider(host, steps);
  return { host, app: appFor(runConfig(host, { scheduler: NOTIFY })) };
}

/** A request with the test env's bindings changed by `over` (undefined: removed). */
async function request(app: App, method: string, path: string, o: { token?: string; body?: unknown; over?: Record<string, unknown> } = {}) {
  const headers: Record<string, string> = o.token ? { Authorization: `Bearer ${o.token}` } : {};
  if (o.body !== undefined) headers["Content-Type"] = "application/json";
  const init = { method, headers, ...(o.body === undefined ? {} : { body: JSON.stringify(o.body) }) };
  return readResponse(await app.request(`https://gateway.test${path}`, init, { ...env, ...o.over } as typeof env));
}

const b64 = (text: string) => Uint8Array.from(atob(text), (ch) => ch.charCodeAt(0));
const b64url = (text: string) => b64(text.replaceAll("-", "+").replaceAll("_", "/") + "=".repeat((4 - (text.length % 4)) % 4));
const signed = (hook: ReceivedHook, body = hook.body) =>
  new TextEncoder().encode(`${hook.headers["webhook-id"]}.${hook.headers["webhook-timestamp"]}.${body}`);

/** The `webhook-signature` entries by version. */
function entries(hook: ReceivedHook): string[][] {
  return (hook.headers["webhook-signature"] ?? "").split(" ").map((e) => [e.slice(0, e.indexOf(",")), e.slice(e.indexOf(",") + 1)]);
}

/** What a receiver that trusts the JWKS does: the kids of the published keys under which the `v1a` entry verifies. */
async function v1aVerifiers(jwks: { keys: { kid: string; x: string }[] }, hook: ReceivedHook, body = hook.body): Promise<string[]> {
  const signature = b64(entries(hook).find(([v]) => v === "v1a")?.[1] ?? "");
  const kids: string[] = [];
  for (const jwk of jwks.keys) {
    const key = await crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", x: jwk.x }, { name: "Ed25519" }, false, ["verify"]);
    if (await crypto.subtle.verify("Ed25519", key, signature, signed(hook, body))) kids.push(jwk.kid);
  }
  return kids;
}

/** The `v1` check a receiver holding `secret` makes, at the webhook's own timestamp. */
function v1Verdict(secret: string, hook: ReceivedHook) {
  const headers = {
    id: hook.headers["webhook-id"] ?? null,
    timestamp: hook.headers["webhook-timestamp"] ?? null,
    signature: hook.headers["webhook-signature"] ?? null,
  };
  return verifyWebhook(webhookKey(secret), headers, hook.body, Number(hook.headers["webhook-timestamp"]));
}

async function secretFor(app: App, url: string, token: string): Promise<string> {
  const path = token === ADMIN ? "/api/admin/webhook-secret" : "/v1/webhook-secret";
  const res = await request(app, "GET", `${path}?url=${encodeURIComponent(url)}`, { token });
  if (res.status !== 200) throw new Error(`${path} answered ${res.status}: ${res.text}`);
  return res.body.secret as string;
}

async function runWithNotify(app: App, url: string, token = ALICE, message = "numbers?"): Promise<string> {
  const res = await request(app, "POST", "/v1/runs", { token, body: { agent_id: "main", message, notify: { url } } });
  if (res.status !== 202) throw new Error(`POST /v1/runs answered ${res.status}: ${res.text}`);
  await waitForRun(app, res.body.id, token);
  return res.body.id as string;
}

describe("ISSUE33 webhooks: the JWKS", () => {
  it("ISSUE33 webhooks: GET /.well-known/jwks.json, without a token, lists the current key then the retired ones; public, cacheable", async () => {
    const app = appFor(runConfig("ok.provider.test"));
    const alone = await request(app, "GET", "/.well-known/jwks.json");
    expect({ status: alone.status, body: alone.body, cache: alone.headers.get("cache-control") }).toEqual({
      status: 200,
      body: { keys: [PUBLISHED("test-signing-2030", CURRENT.x)] },
      cache: "public, max-age=300",
    });
    // The retired list as a JSON array and as a JWKS: the same set, the current key first.
    for (const retired of [JSON.stringify([RETIRED_PUBLIC]), JSON.stringify({ keys: [RETIRED_PUBLIC] })]) {
      const res = await request(app, "GET", "/.well-known/jwks.json", { over: { GATEWAY_SIGNING_KEYS_RETIRED: retired } });
      expect({ status: res.status, body: res.body }).toEqual({
        status: 200,
        body: { keys: [PUBLISHED("test-signing-2030", CURRENT.x), PUBLISHED("test-signing-2029", RETIRED_PUBLIC.x)] },
      });
    }
  });

  it("ISSUE33 webhooks: a retired key is still listed, and what it signed before the rotation still verifies with the JWKS (only under its kid)", async () => {
    const app = appFor(runConfig("ok.provider.test"));
    const res = await request(app, "GET", "/.well-known/jwks.json", {
      over: { GATEWAY_SIGNING_KEYS_RETIRED: JSON.stringify([RETIRED_PUBLIC]) },
    });
    expect(res.body.keys.map((k: { kid: string }) => k.kid)).toEqual(["test-signing-2030", "test-signing-2029"]);
    const old = await crypto.subtle.importKey("jwk", { ...RETIRED_PUBLIC, d: RETIRED_D }, { name: "Ed25519" }, false, ["sign"]);
    const body = '{"type":"job.run.finished"}';
    const content = `msg_old.1893456000.${body}`;
    const signature = btoa(
      String.fromCharCode(...new Uint8Array(await crypto.subtle.sign("Ed25519", old, new TextEncoder().encode(content)))),
    );
    const hook = {
      host: "h",
      path: "/",
      answered: 200,
      body,
      headers: { "webhook-id": "msg_old", "webhook-timestamp": "1893456000", "webhook-signature": `v1a,${signature}` },
    };
    expect(await v1aVerifiers(res.body, hook)).toEqual(["test-signing-2029"]);
    expect(await v1aVerifiers(res.body, hook, body.replace("job", "jab"))).toEqual([]);
  });

  it("ISSUE33 webhooks: OpenAPI documents the JWKS as public and each webhook-secret route with its door's credential", async () => {
    const doc = (await request(appFor(runConfig("ok.provider.test")), "GET", "/openapi.json")).body;
    const jwks = doc.paths["/.well-known/jwks.json"].get;
    expect([jwks.security, jwks["x-auth"], Object.keys(jwks.responses)]).toEqual([[], "none", ["200", "503"]]);
    expect(doc.components.schemas.Jwk.required).toEqual(["kty", "crv", "kid", "x", "use", "alg"]);
    expect(doc.paths["/v1/webhook-secret"].get.security).toEqual([{ api: [] }]);
    expect(doc.paths["/api/admin/webhook-secret"].get.security).toEqual([{ admin: [] }]);
    expect(Object.keys(doc.components.schemas.WebhookSecret.properties)).toEqual(["endpoint", "secret"]);
  });
});

describe("ISSUE33 webhooks: every webhook carries v1a with the gateway key and v1 with its endpoint's own key", () => {
  it("ISSUE33 webhooks: a completion webhook received by the mock verifies (v1a) with the published JWKS key, and v1 with the caller's endpoint secret only", async () => {
    const { app } = await setup([{ content: "the numbers are in" }]);
    const target = hookHost("ok");
    const id = await runWithNotify(app, `https://${target}/in?team=7`);
    await until(async () => (await hooksAt(target)).length === 1);
    const [hook] = (await hooksAt(target)) as [ReceivedHook];
    expect(JSON.parse(hook.body)).toMatchObject({ id, status: "completed", output: "the numbers are in" });
    // Two entries over one content: v1 (HMAC-SHA256, 32 bytes) and v1a (Ed25519, 64 bytes).
    expect(entries(hook).map(([v, s]) => [v, b64(s as string).length])).toEqual([
      ["v1", 32],
      ["v1a", 64],
    ]);
    const jwks = (
      await request(app, "GET", "/.well-known/jwks.json", { over: { GATEWAY_SIGNING_KEYS_RETIRED: JSON.stringify([RETIRED_PUBLIC]) } })
    ).body;
    expect(await v1aVerifiers(jwks, hook)).toEqual(["test-signing-2030"]);
    expect(await v1aVerifiers(jwks, hook, hook.body.replace("completed", "failed"))).toEqual([]);
    // v1: the caller's secret for the URL (its query is not part of the endpoint) — not the old shared master.
    const secret = await secretFor(app, `https://${target}/in`, ALICE);
    expect(await secretFor(app, `https://${target}/in?team=7`, ALICE)).toBe(secret);
    expect(await v1Verdict(secret, hook)).toEqual({ ok: true });
    expect(await v1Verdict(env.SCHEDULER_WEBHOOK_SECRET as string, hook)).toEqual({ ok: false, reason: "signature" });
  });

  it("ISSUE33 webhooks: caller A's v1 secret cannot verify caller B's webhook to the same URL, nor the operator's secret either", async () => {
    const { app } = await setup([{ content: "for alice" }, { content: "for bob" }]);
    const target = hookHost("ok");
    const url = `https://${target}/shared`;
    const aliceRun = await runWithNotify(app, url, ALICE);
    const bobRun = await runWithNotify(app, url, BOB);
    await until(async () => (await hooksAt(target)).length === 2);
    const byRun = Object.fromEntries((await hooksAt(target)).map((h) => [JSON.parse(h.body).id as string, h]));
    const [aliceHook, bobHook] = [byRun[aliceRun] as ReceivedHook, byRun[bobRun] as ReceivedHook];
    const [alice, bob, operator] = [await secretFor(app, url, ALICE), await secretFor(app, url, BOB), await secretFor(app, url, ADMIN)];
    expect(new Set([alice, bob, operator]).size).toBe(3);
    expect(await v1Verdict(alice, aliceHook)).toEqual({ ok: true });
    expect(await v1Verdict(alice, bobHook)).toEqual({ ok: false, reason: "signature" });
    expect(await v1Verdict(bob, bobHook)).toEqual({ ok: true });
    expect(await v1Verdict(bob, aliceHook)).toEqual({ ok: false, reason: "signature" });
    expect(await v1Verdict(operator, aliceHook)).toEqual({ ok: false, reason: "signature" });
    expect(await v1Verdict(operator, bobHook)).toEqual({ ok: false, reason: "signature" });
    // Both are the gateway's, and say so the same way.
    const jwks = (await request(app, "GET", "/.well-known/jwks.json")).body;
    expect([await v1aVerifiers(jwks, aliceHook), await v1aVerifiers(jwks, bobHook)]).toEqual([
      ["test-signing-2030"],
      ["test-signing-2030"],
    ]);
  });

  it("ISSUE33 webhooks: endpoint secrets are HKDF-SHA256 of the master per owner and endpoint (known answers from Node's hkdf)", async () => {
    const app = appFor(runConfig("ok.provider.test"));
    const url = "https://pinned.hook.test/in";
    const res = await request(app, "GET", `/v1/webhook-secret?url=${encodeURIComponent(`${url}?run=1#x`)}`, { token: ALICE });
    expect({ status: res.status, body: res.body, cache: res.headers.get("cache-control") }).toEqual({
      status: 200,
      body: { endpoint: url, secret: "whsec_olQFDoThqW49y+AFaKJsDZynZwnE78Oji75PG+2vfaU=" },
      cache: "no-store",
    });
    expect(await secretFor(app, url, BOB)).toBe("whsec_ja9or0wAXqQLEGNTaIAiC2OMcZfb+E2t+OBwuOBikOI=");
    expect(await secretFor(app, url, ADMIN)).toBe("whsec_OSbm3g6TDL9rnF7rlEyEAgYP3kITQ9hIlPgkaugvJj8=");
    // A URL no webhook may go to has no secret; without the master there is none to give.
    const refused = await request(app, "GET", `/v1/webhook-secret?url=${encodeURIComponent("http://pinned.hook.test/in")}`, {
      token: ALICE,
    });
    expect([refused.status, refused.body]).toEqual([400, { error: { code: "invalid.request", message: "url: must be an https URL" } }]);
    const missing = await request(app, "GET", "/v1/webhook-secret", { token: ALICE });
    expect([missing.status, missing.body]).toEqual([400, { error: { code: "invalid.request", message: "url is required" } }]);
    const noMaster = await request(app, "GET", `/api/admin/webhook-secret?url=${encodeURIComponent(url)}`, {
      token: ADMIN,
      over: { SCHEDULER_WEBHOOK_SECRET: undefined },
    });
    expect([noMaster.status, noMaster.body]).toEqual([
      503,
      { error: { code: "signing.unavailable", message: "SCHEDULER_WEBHOOK_SECRET is not set to a whsec_ secret" } },
    ]);
    expect((await request(app, "GET", `/v1/webhook-secret?url=${encodeURIComponent(url)}`)).status).toBe(401);
    expect((await request(app, "GET", `/api/admin/webhook-secret?url=${encodeURIComponent(url)}`, { token: ALICE })).status).toBe(403);
  });

  it("ISSUE33 webhooks: a job notification carries v1 with the operator's endpoint secret and v1a with the gateway key", async () => {
    const config = runConfig("ok-notify.provider.test", { agentId: "notifier33", agent: { tools: { allow: [] } }, scheduler: NOTIFY });
    const app = appFor(config);
    const target = hookHost("ok");
    const write = JobWrite.parse({
      job_id: "issue33-job",
      agent_id: "notifier33",
      schedule: "@every 1h",
      message: "daily numbers",
      mode: "isolated",
      enabled: true,
      notify: { channel: "webhook", target: `https://${target}/hooks/jobs` },
    });
    expect((await createJob(env.DB, write, new Date("2030-01-01T10:00:00Z"))).ok).toBe(true);
    const controller = createScheduledController({ scheduledTime: new Date("2030-01-01T11:00:00Z"), cron: "* * * * *" });
    await runSchedulerTick(env, controller, createLogger("error"), { config });
    await until(async () => (await hooksAt(target)).length === 1);
    const [hook] = (await hooksAt(target)) as [ReceivedHook];
    expect(JSON.parse(hook.body)).toMatchObject({ type: "job.run.finished", data: { job_id: "issue33-job", status: "completed" } });
    expect(await v1aVerifiers((await request(app, "GET", "/.well-known/jwks.json")).body, hook)).toEqual(["test-signing-2030"]);
    expect(await v1Verdict(await secretFor(app, `https://${target}/hooks/jobs`, ADMIN), hook)).toEqual({ ok: true });
    expect(await v1Verdict(await secretFor(app, `https://${target}/hooks/jobs`, ALICE), hook)).toEqual({ ok: false, reason: "signature" });
    await env.DB.batch([env.DB.prepare("DELETE FROM jobs"), env.DB.prepare("DELETE FROM job_firings")]);
  });
});

const TEST_JWK = { kty: "OKP", crv: "Ed25519", kid: CURRENT.kid, x: CURRENT.x, d: CURRENT.d };
const MAKE_ONE = "(npm run -s signing-key makes one)";
/** Unusable signing configurations and the one line each feature that signs refuses with. */
const UNUSABLE: [string, Record<string, unknown>, string][] = [
  ["no key", { GATEWAY_SIGNING_KEY: undefined }, `GATEWAY_SIGNING_KEY is not set on this gateway ${MAKE_ONE}`],
  [
    "not JSON",
    { GATEWAY_SIGNING_KEY: "-----BEGIN PRIVATE KEY-----" },
    `GATEWAY_SIGNING_KEY is not a JSON object (an Ed25519 private JWK) ${MAKE_ONE}`,
  ],
  [
    "an RSA key",
    { GATEWAY_SIGNING_KEY: JSON.stringify({ ...TEST_JWK, kty: "RSA" }) },
    `GATEWAY_SIGNING_KEY must be an Ed25519 JWK (kty "OKP", crv "Ed25519") ${MAKE_ONE}`,
  ],
  [
    "no kid",
    { GATEWAY_SIGNING_KEY: JSON.stringify({ ...TEST_JWK, kid: undefined }) },
    `GATEWAY_SIGNING_KEY needs a kid of 1–64 letters, digits, . _ - ${MAKE_ONE}`,
  ],
  [
    "the public key only",
    { GATEWAY_SIGNING_KEY: JSON.stringify({ ...TEST_JWK, d: undefined }) },
    `GATEWAY_SIGNING_KEY needs d: the private key, 32 bytes in unpadded base64url ${MAKE_ONE}`,
  ],
  [
    "x of another key",
    { GATEWAY_SIGNING_KEY: JSON.stringify({ ...TEST_JWK, d: OTHER_D }) },
    "GATEWAY_SIGNING_KEY: x is not the public key of d (or not an Ed25519 key)",
  ],
  [
    "a private key in the retired list",
    { GATEWAY_SIGNING_KEYS_RETIRED: JSON.stringify([{ ...RETIRED_PUBLIC, d: RETIRED_D }]) },
    "GATEWAY_SIGNING_KEYS_RETIRED [0] must hold public keys only: remove d",
  ],
  [
    "a retired list that is not a list",
    { GATEWAY_SIGNING_KEYS_RETIRED: '"test-signing-2029"' },
    "GATEWAY_SIGNING_KEYS_RETIRED must be a JSON array of Ed25519 public JWKs, or a JWKS {keys: […]}",
  ],
  [
    "the current kid retired",
    { GATEWAY_SIGNING_KEYS_RETIRED: JSON.stringify([{ ...RETIRED_PUBLIC, kid: CURRENT.kid }]) },
    "GATEWAY_SIGNING_KEYS_RETIRED lists the kid of GATEWAY_SIGNING_KEY; a kid names one key",
  ],
];

describe("ISSUE33 webhooks: a missing or malformed signing key fails closed, with one line naming it", () => {
  it(`ISSUE33 webhooks: JWKS 503, notify and webhook jobs 400, admin status names it; runs without notify still 202 (${UNUSABLE.length} cases)`, async () => {
    const { app, host } = await setup([{ content: "plain run" }]);
    for (const [name, over, problem] of UNUSABLE) {
      const jwks = await request(app, "GET", "/.well-known/jwks.json", { over });
      expect({ name, status: jwks.status, body: jwks.body, cache: jwks.headers.get("cache-control") }).toEqual({
        name,
        status: 503,
        body: { error: { code: "signing.unavailable", message: problem } },
        cache: "no-store",
      });
      const run = await request(app, "POST", "/v1/runs", {
        token: ALICE,
        over,
        body: { agent_id: "main", message: "hi", notify: { url: "https://ok.hook.test/in" } },
      });
      expect({ name, status: run.status, body: run.body }).toEqual({
        name,
        status: 400,
        body: { error: { code: "invalid.request", message: `notify: completion webhooks cannot be signed: ${problem}` } },
      });
      const job = await request(app, "POST", "/api/admin/jobs", {
        token: ADMIN,
        over,
        body: {
          job_id: "issue33-nokey",
          agent_id: "main",
          schedule: "@every 1h",
          message: "m",
          mode: "isolated",
          enabled: true,
          notify: { channel: "webhook", target: "https://ok.hook.test/x" },
        },
      });
      expect({ name, status: job.status, body: job.body }).toEqual({
        name,
        status: 400,
        body: { error: { code: "invalid.request", message: `notify.channel: webhook notifications cannot be signed: ${problem}` } },
      });
      const status = await request(app, "GET", "/api/admin/status", { token: ADMIN, over });
      expect({ name, signing: status.body.signing_key }).toEqual({ name, signing: { status: "unusable", message: problem } });
    }
    // No refused run reached the model (the status route's provider check lists models: a GET).
    expect((await requestsTo(host)).filter((r) => r.method === "POST")).toEqual([]);
    // What does not sign is untouched: a run without notify is queued and answered.
    const plain = await request(app, "POST", "/v1/runs", {
      token: ALICE,
      over: { GATEWAY_SIGNING_KEY: undefined },
      body: { agent_id: "main", message: "hi" },
    });
    expect(plain.status).toBe(202);
    expect((await waitForRun(app, plain.body.id)).output).toBe("plain run");
    expect((await request(app, "GET", "/api/admin/status", { token: ADMIN })).body.signing_key).toEqual({
      status: "ok",
      kid: "test-signing-2030",
    });
  });

  it("ISSUE33 webhooks: a queued webhook whose gateway lost its key fails at once, naming it; nothing unsigned is sent", async () => {
    const target = hookHost("ok");
    const events: [string, Record<string, unknown>][] = [];
    const outcome = await runInDurableObject(env.SESSIONS.getByName(`issue33-${crypto.randomUUID()}`), async (_i, state) => {
      const sql = createSql(state.storage.sql);
      state.storage.transactionSync(() => {
        sql.run`INSERT INTO runs (id, session_id, source, agent_id, status, message_seq, created_at, updated_at)
                VALUES ('run_33', 's', 'job', 'main', 'completed', 1, 'now', 'now')`;
        enqueueNotify(sql, "run_33", {
          channel: "webhook",
          target: `https://${target}/x`,
          webhookId: "msg_33",
          jobId: "j33",
          scheduledFor: "2030-01-01T00:00:00.000Z",
          maxAttempts: 3,
          retryBaseMs: 1_000,
          timeoutMs: 1_000,
        });
      });
      const host = { sql, storage: state.storage, env: { ...env, GATEWAY_SIGNING_KEY: undefined }, secrets: [] };
      await deliverNotifications({ ...host, audit: (type, _run, payload) => events.push([type, payload]) }, 0);
      return sql.one<{
        status: string;
        attempts: number;
        last_error: string;
      }>`SELECT status, attempts, last_error FROM notify_outbox WHERE run_id = 'run_33'`;
    });
    const problem = `GATEWAY_SIGNING_KEY is not set on this gateway ${MAKE_ONE}`;
    expect(outcome).toEqual({ status: "failed", attempts: 1, last_error: problem });
    expect(events).toEqual([
      [
        "job.notify.failed",
        {
          job_id: "j33",
          scheduled_for: "2030-01-01T00:00:00.000Z",
          channel: "webhook",
          webhook_id: "msg_33",
          attempt: 1,
          http_status: null,
          error: problem,
        },
      ],
    ]);
    expect(await hooksAt(target)).toEqual([]);
  });

  it("ISSUE33 webhooks: the signing key and its retired list cannot be stored through the admin API", async () => {
    const app = appFor(runConfig("ok.provider.test"));
    for (const name of ["GATEWAY_SIGNING_KEY", "GATEWAY_SIGNING_KEYS_RETIRED"]) {
      const res = await request(app, "POST", "/api/admin/secrets", {
        token: ADMIN,
        body: { name, value: JSON.stringify({ ...TEST_JWK, d: OTHER_D }) },
      });
      expect([res.status, res.body]).toEqual([
        400,
        {
          error: {
            code: "invalid.request",
            message: `${name} can only be set as a Worker secret (wrangler secret put), not through the API`,
          },
        },
      ]);
    }
  });
});

async function everyObject(bucket: R2Bucket): Promise<{ key: string; text: string }[]> {
  const out: { key: string; text: string }[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ ...(cursor ? { cursor } : {}) });
    for (const o of page.objects) out.push({ key: o.key, text: (await (await bucket.get(o.key))?.text()) ?? "" });
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return out;
}

afterEach(() => vi.restoreAllMocks());

describe("ISSUE33 webhooks: the private key stays private", () => {
  it("ISSUE33 webhooks: the private key is in no log line, audit event, R2 object, Durable Object row, response or webhook — even pasted into a message", async () => {
    const lines: string[] = [];
    for (const level of ["log", "warn", "error", "info", "debug"] as const)
      vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
        lines.push(args.map(String).join(" "));
      });
    const { app } = await setup([{ content: "done" }]);
    const target = hookHost("ok");
    const id = await runWithNotify(app, `https://${target}/leak`, ALICE, `keep this safe: ${CURRENT.d}`);
    await until(async () => (await hooksAt(target)).length === 1);
    const responses = [
      await request(app, "GET", `/v1/runs/${id}`, { token: ALICE }),
      await request(app, "GET", `/api/admin/runs/${id}`, { token: ADMIN }),
      await request(app, "GET", "/.well-known/jwks.json"),
      await request(app, "GET", "/api/admin/status", { token: ADMIN }),
      await request(app, "GET", "/api/admin/config", { token: ADMIN }),
      await request(app, "GET", "/api/admin/secrets", { token: ADMIN }),
      await request(app, "GET", `/v1/webhook-secret?url=https://${target}/leak`, { token: ALICE }),
      ...(await Promise.all(UNUSABLE.map(([, over]) => request(app, "GET", "/.well-known/jwks.json", { over })))),
    ].map((r) => r.text);
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(id) as string));
    await until(async () => (await auditBacklog(stub)) === 0);
    const storage = await runInDurableObject(stub, (_i, state: DurableObjectState) =>
      state.storage.sql
        .exec<{ name: string }>(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND substr(name, 1, 4) <> '_cf_' AND name NOT LIKE '%_fts%'",
        )
        .toArray()
        .map((t) => `${t.name}: ${JSON.stringify(state.storage.sql.exec(`SELECT * FROM "${t.name}"`).toArray())}`),
    );
    // The message was stored, with the key redacted.
    expect(storage.some((row) => row.startsWith("transcript:") && row.includes("keep this safe: [REDACTED:"))).toBe(true);
    const places = [
      ...[...(await everyObject(env.AUDIT)), ...(await everyObject(env.WORKSPACE))].map((o) => ({ where: `R2 ${o.key}`, text: o.text })),
      ...lines.map((text, i) => ({ where: `log line ${i}`, text })),
      ...storage.map((text) => ({ where: `DO ${text.slice(0, text.indexOf(":"))}`, text })),
      ...responses.map((text, i) => ({ where: `response ${i}`, text })),
      ...(await hooksAt(target)).map((h) => ({ where: "webhook", text: JSON.stringify(h) })),
    ];
    expect(places.some((p) => p.where.startsWith("R2 agents/main/audit/"))).toBe(true); // the scan saw the run's audit
    const d = CURRENT.d;
    const canaries = {
      jwk: env.GATEWAY_SIGNING_KEY as string,
      d,
      dBase64: btoa(String.fromCharCode(...b64url(d))),
      dUpper: d.toUpperCase(),
    };
    const found = places.flatMap((p) =>
      Object.entries(canaries)
        .filter(([, v]) => p.text.includes(v))
        .map(([n]) => `${n} in ${p.where}`),
    );
    expect(found).toEqual([]);
  });
});

/**
 * Issue 24 §5: completion webhooks for API callers. A run started with `notify: {url}` on POST /v1/runs or
 * POST /v1/chat/messages POSTs its run view (as GET /v1/runs/{id} answers it) to the URL when it ends or waits for an
 * approval — signed with Standard Webhooks, through the job notifications' outbox (same retries under one webhook-id,
 * audited) — and a URL the outbound rules refuse, or a gateway with no signing secret, is a 400 before anything is
 * queued. The receivers are `*.hook.test` (test/support/outbound.ts).
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { verifyWebhook, webhookKey } from "../../src/channels/standard-webhooks";
import { runWebhookIdFor } from "../../src/scheduler/run-notify";
import { endpointSecret } from "../../src/scheduler/webhook-keys";
import ssrf from "../fixtures/ssrf-targets.json";
import { requestsTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { ReceivedHook } from "../support/outbound";
import { ADMIN, ALICE, type App, appFor, call, readResponse, registerTestTools, runDetail, until, waitForRun } from "../support/runs";

registerTestTools();

const NOTIFY = { notify: { maxAttempts: 3, retryBaseMs: 100, timeoutMs: 1000 } };
const hookHost = (scenario: string) => `${scenario}-${crypto.randomUUID().slice(0, 8)}.hook.test`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const today = () => new Date().toISOString().slice(0, 10);

async function hooksAt(h: string): Promise<ReceivedHook[]> {
  return (await fetch(`https://mock.control/hooks?host=${h}`)).json();
}

/** Waits for `n` deliveries to `h`, then a little longer, so a duplicate would have arrived too. */
async function deliveries(h: string, n: number): Promise<ReceivedHook[]> {
  await until(async () => (await hooksAt(h)).length >= n);
  await sleep(400);
  return hooksAt(h);
}

/** A scripted provider and an app on it, with fast notification retries. */
async function setup(steps: Parameters<typeof scriptProvider>[1], o: { runs?: Record<string, unknown>; scenario?: string } = {}) {
  const host = uniqueHost(o.scenario ?? "script");
  if (!o.scenario) await scriptProvider(host, steps);
  return { host, app: appFor(runConfig(host, { scheduler: NOTIFY, ...(o.runs ? { runs: o.runs } : {}) })) };
}

/** A POST as alice with `headers` and the bindings `bindings` (the test env unless given). */
async function post(app: App, path: string, body: unknown, o: { headers?: Record<string, string>; bindings?: unknown } = {}) {
  const res = await app.request(
    `https://gateway.test${path}`,
    {
      method: "POST",
      headers: { Authorization: `Bearer ${ALICE}`, "Content-Type": "application/json", ...o.headers },
      body: JSON.stringify(body),
    },
    (o.bindings ?? env) as typeof env,
  );
  return readResponse(res);
}

/**
 * The signature check a receiver makes (Standard Webhooks rules, now), with the `v1` secret of alice's endpoint (D-089:
 * each caller's endpoint has its own key, as `GET /v1/webhook-secret?url=` hands it out).
 */
async function verdict(hook: ReceivedHook) {
  const secret = await endpointSecret(env, { callerId: "alice" }, new URL(`https://${hook.host}${hook.path}`));
  return verifyWebhook(
    webhookKey(secret ?? undefined),
    {
      id: hook.headers["webhook-id"] ?? null,
      timestamp: hook.headers["webhook-timestamp"] ?? null,
      signature: hook.headers["webhook-signature"] ?? null,
    },
    hook.body,
    Math.floor(Date.now() / 1000),
  );
}

async function auditOf(app: App, runId: string): Promise<{ event_type: string; actor: string; payload: Record<string, unknown> }[]> {
  const res = await call(app, "GET", `/api/admin/audit?agent_id=main&date=${today()}`, undefined, ADMIN);
  if (res.status !== 200) return [];
  return res.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => e.run_id === runId && String(e.event_type).startsWith("run.notify"));
}

const send = (id: string) => ({ tool_calls: [{ id, name: "test__send", arguments: JSON.stringify({ to: "ops@example.com", text: id }) }] });

describe("ISSUE24-5 completion webhooks: delivery", () => {
  it("ISSUE24-5 a run started with notify → exactly one signed POST with its run view, audited; the URL is recorded in run.created", async () => {
    const { app } = await setup([{ content: "the numbers are in" }]);
    const target = hookHost("ok");
    const res = await post(app, "/v1/runs", { agent_id: "main", message: "numbers?", notify: { url: `https://${target}/in?team=7` } });
    expect(res.status).toBe(202);
    const id = res.body.id as string;
    const run = await waitForRun(app, id);
    const hooks = await deliveries(target, 1);
    expect(hooks).toHaveLength(1);
    const hook = hooks[0] as ReceivedHook;
    expect(hook.path).toBe("/in");
    expect(hook.answered).toBe(200);
    expect(hook.headers["content-type"]).toBe("application/json");
    expect(hook.headers["webhook-id"]).toBe(await runWebhookIdFor(id, "completed"));
    expect(await verdict(hook)).toEqual({ ok: true });
    // The body is the run view GET /v1/runs/{id} answers, byte for byte once parsed.
    expect(JSON.parse(hook.body)).toEqual(run);
    expect(JSON.parse(hook.body)).toMatchObject({
      id,
      agent_id: "main",
      source: "http",
      status: "completed",
      output: "the numbers are in",
    });
    // A tampered body does not verify.
    expect(await verdict({ ...hook, body: hook.body.replace("completed", "failed") })).toEqual({ ok: false, reason: "signature" });
    const created = (await runDetail(app, id)).events.find((e: { event_type: string }) => e.event_type === "run.created");
    expect(created.payload.notify_url).toBe(`https://${target}/in?team=7`);
    await until(async () => (await auditOf(app, id)).length === 1);
    expect((await auditOf(app, id)).map((e) => [e.event_type, e.actor, e.payload])).toEqual([
      [
        "run.notify.delivered",
        "scheduler",
        { channel: "run", webhook_id: hook.headers["webhook-id"], state: "completed", attempt: 1, http_status: 200 },
      ],
    ]);
  });

  it("ISSUE24-5 a failed run → one POST with status failed", async () => {
    const { app } = await setup([], { scenario: "error500", runs: { providerAttempts: 1 } });
    const target = hookHost("ok");
    const res = await post(app, "/v1/runs", { agent_id: "main", message: "hi", notify: { url: `https://${target}/failed` } });
    expect(res.status).toBe(202);
    const run = await waitForRun(app, res.body.id);
    expect(run.status).toBe("failed");
    const hooks = await deliveries(target, 1);
    expect(hooks).toHaveLength(1);
    expect(JSON.parse((hooks[0] as ReceivedHook).body)).toMatchObject({
      id: res.body.id,
      status: "failed",
      output: "the provider failed for moonshot:kimi-k1-128k (HTTP 500)",
    });
    expect((hooks[0] as ReceivedHook).headers["webhook-id"]).toBe(await runWebhookIdFor(res.body.id, "failed"));
    expect(await verdict(hooks[0] as ReceivedHook)).toEqual({ ok: true });
  });

  it("ISSUE24-5 a run that pauses for an approval → one POST with awaiting_approval, then after the decision one with completed", async () => {
    const { app } = await setup([send("s1"), { content: "sent it" }]);
    const target = hookHost("ok");
    const res = await post(app, "/v1/runs", { agent_id: "main", message: "tell ops", notify: { url: `https://${target}/a` } });
    const id = res.body.id as string;
    await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
    const first = await deliveries(target, 1);
    expect(first).toHaveLength(1);
    expect(JSON.parse((first[0] as ReceivedHook).body)).toMatchObject({ id, status: "awaiting_approval", tool_calls: 1 });
    const approvalId = (await runDetail(app, id)).events.find((e: { event_type: string }) => e.event_type === "approval.requested").payload
      .approval_id as string;
    const decided = await call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision: "approve" }, ADMIN);
    expect(decided.status).toBe(200);
    const run = await waitForRun(app, id);
    expect(run).toMatchObject({ status: "completed", output: "sent it" });
    const hooks = await deliveries(target, 2);
    expect(hooks.map((h) => JSON.parse(h.body).status)).toEqual(["awaiting_approval", "completed"]);
    expect(JSON.parse((hooks[1] as ReceivedHook).body)).toEqual(run);
    const ids = hooks.map((h) => h.headers["webhook-id"]);
    expect(new Set(ids).size).toBe(2);
    expect(ids[1]).toBe(await runWebhookIdFor(id, "completed"));
    for (const h of hooks) expect(await verdict(h)).toEqual({ ok: true });
    await until(async () => (await auditOf(app, id)).length === 2);
    expect((await auditOf(app, id)).map((e) => [e.event_type, e.payload.state, e.payload.attempt])).toEqual([
      ["run.notify.delivered", "awaiting_approval", 1],
      ["run.notify.delivered", "completed", 1],
    ]);
  });

  it("ISSUE24-5 a run cancelled while it waits for an approval → awaiting_approval, then cancelled", async () => {
    const { app } = await setup([send("c1"), { content: "never" }]);
    const target = hookHost("ok");
    const res = await post(app, "/v1/runs", { agent_id: "main", message: "tell ops", notify: { url: `https://${target}/c` } });
    const id = res.body.id as string;
    await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
    expect(await deliveries(target, 1)).toHaveLength(1);
    expect((await call(app, "POST", `/v1/runs/${id}/cancel`)).status).toBe(202);
    const run = await waitForRun(app, id);
    expect(run.status).toBe("cancelled");
    const hooks = await deliveries(target, 2);
    expect(hooks.map((h) => JSON.parse(h.body).status)).toEqual(["awaiting_approval", "cancelled"]);
    expect((hooks[1] as ReceivedHook).headers["webhook-id"]).toBe(await runWebhookIdFor(id, "cancelled"));
  });

  it("ISSUE24-5 a receiver answering 500 then 200 → retried with the same webhook-id and body, delivered once", async () => {
    const { app } = await setup([{ content: "ok" }]);
    const target = hookHost("flaky");
    const res = await post(app, "/v1/runs", { agent_id: "main", message: "hi", notify: { url: `https://${target}/in?fail=1&code=500` } });
    const id = res.body.id as string;
    await waitForRun(app, id);
    const hooks = await deliveries(target, 2);
    expect(hooks.map((h) => h.answered)).toEqual([500, 200]);
    expect(hooks.map((h) => h.headers["webhook-id"])).toEqual([
      await runWebhookIdFor(id, "completed"),
      await runWebhookIdFor(id, "completed"),
    ]);
    expect(new Set(hooks.map((h) => h.body)).size).toBe(1);
    for (const h of hooks) expect(await verdict(h)).toEqual({ ok: true });
    await until(async () => (await auditOf(app, id)).length === 2);
    expect((await auditOf(app, id)).map((e) => [e.event_type, e.payload.attempt, e.payload.http_status])).toEqual([
      ["run.notify.retrying", 1, 500],
      ["run.notify.delivered", 2, 200],
    ]);
  });

  it("ISSUE24-5 an Idempotency-Key retry returns the same run and notifies once", async () => {
    const { app } = await setup([{ content: "once" }]);
    const target = hookHost("ok");
    const body = { agent_id: "main", message: "hi", notify: { url: `https://${target}/in` } };
    const headers = { "Idempotency-Key": `key-${crypto.randomUUID()}` };
    const a = await post(app, "/v1/runs", body, { headers });
    await waitForRun(app, a.body.id);
    const b = await post(app, "/v1/runs", body, { headers });
    expect(b.body.id).toBe(a.body.id);
    expect(await deliveries(target, 1)).toHaveLength(1);
  });

  it("ISSUE24-5 POST /v1/chat/messages with notify → one signed POST with the run's view", async () => {
    const { app } = await setup([{ content: "hello back" }]);
    const target = hookHost("ok");
    const res = await post(app, "/v1/chat/messages", {
      user_id: "u1",
      room_id: `r-${crypto.randomUUID().slice(0, 8)}`,
      agent_id: "main",
      message: "hello",
      notify: { url: `https://${target}/chat` },
    });
    expect(res.status).toBe(202);
    const run = await waitForRun(app, res.body.id);
    const hooks = await deliveries(target, 1);
    expect(hooks).toHaveLength(1);
    expect(JSON.parse((hooks[0] as ReceivedHook).body)).toEqual(run);
    expect(run).toMatchObject({ status: "completed", output: "hello back" });
    expect(await verdict(hooks[0] as ReceivedHook)).toEqual({ ok: true });
  });
});

describe("ISSUE24-5 completion webhooks: OpenAPI", () => {
  it("ISSUE24-5 RunRequest and ChatMessageRequest document notify as the RunNotify component", async () => {
    const doc = (await (await appFor(runConfig("ok.provider.test")).request("https://gateway.test/openapi.json", {}, env)).json()) as any;
    expect(doc.components.schemas.RunRequest.properties.notify).toEqual({ $ref: "#/components/schemas/RunNotify" });
    expect(doc.components.schemas.ChatMessageRequest.properties.notify).toEqual({ $ref: "#/components/schemas/RunNotify" });
    expect(doc.components.schemas.RunRequest.required).toEqual(["agent_id", "message"]);
    expect(doc.components.schemas.RunNotify).toMatchObject({ type: "object", required: ["url"], additionalProperties: false });
    expect(Object.keys(doc.components.schemas.RunNotify.properties)).toEqual(["url"]);
  });
});

/** The 400's words for each of checkUrl's refusals (src/tools/net-policy.ts). */
const RULES = {
  scheme: "must be an https URL",
  userinfo: "must not carry credentials (user:password@)",
  port: "must use the default https port",
  private_address: "must not point at a private, loopback or link-local address",
  internal_hostname: "must not point at an internal host name",
} as const;

/** URLs the outbound rules refuse, and the 400's message. */
const REFUSED: [string, string][] = [
  ["http://ok.hook.test/in", "notify.url: must be an https URL"],
  ["ftp://ok.hook.test/in", "notify.url: must be an https URL"],
  ["https://127.0.0.1/in", "notify.url: must not point at a private, loopback or link-local address"],
  ["https://10.0.0.7/in", "notify.url: must not point at a private, loopback or link-local address"],
  ["https://169.254.169.254/latest/meta-data", "notify.url: must not point at a private, loopback or link-local address"],
  ["https://[::1]/in", "notify.url: must not point at a private, loopback or link-local address"],
  ["https://localhost/in", "notify.url: must not point at an internal host name"],
  ["https://metadata.google.internal/in", "notify.url: must not point at an internal host name"],
  ["https://user:pass@ok.hook.test/in", "notify.url: must not carry credentials (user:password@)"],
  ["https://ok.hook.test:8443/in", "notify.url: must use the default https port"],
  [`https://ok.hook.test/${"a".repeat(2048)}`, "notify.url: must be at most 2048 characters"],
  ["not a url", "notify.url: is not a valid URL"],
];

/** `notify` values of the wrong shape, and the 400's message. */
const MALFORMED: [unknown, string][] = [
  [{ url: 5 }, "notify.url: Invalid input: expected string, received number"],
  [{}, "notify.url is required"],
  [{ url: "https://ok.hook.test/", secret: "x" }, "unknown field notify.secret"],
  ["https://ok.hook.test/", "notify: Invalid input: expected object, received string"],
];

describe("ISSUE24-5 completion webhooks: refused before anything is queued", () => {
  for (const path of ["/v1/runs", "/v1/chat/messages"]) {
    it(`ISSUE24-5 ${path}: a URL the outbound rules refuse → 400 naming notify.url, no run queued (${REFUSED.length + MALFORMED.length} cases)`, async () => {
      const { app, host } = await setup([{ content: "never" }]);
      const base =
        path === "/v1/runs" ? { agent_id: "main", message: "hi" } : { agent_id: "main", message: "hi", user_id: "u", room_id: "r" };
      for (const [url, message] of REFUSED) {
        const res = await post(app, path, { ...base, notify: { url } });
        expect({ url, status: res.status, body: res.body }).toEqual({
          url,
          status: 400,
          body: { error: { code: "invalid.request", message } },
        });
      }
      for (const [notify, message] of MALFORMED) {
        const res = await post(app, path, { ...base, notify });
        expect({ status: res.status, body: res.body }).toEqual({ status: 400, body: { error: { code: "invalid.request", message } } });
      }
      await sleep(200);
      expect(await requestsTo(host)).toEqual([]); // no run reached the model
    });

    it(`ISSUE24-5 ${path}: every SSRF target http.get refuses, as http and as https → 400 naming notify.url (${ssrf.targets.length * 2} cases)`, async () => {
      const { app, host } = await setup([{ content: "never" }]);
      const base =
        path === "/v1/runs" ? { agent_id: "main", message: "hi" } : { agent_id: "main", message: "hi", user_id: "u", room_id: "r" };
      for (const t of ssrf.targets) {
        // As given (an http:// target is refused for its host first: checkUrl's order), then the same target over https.
        for (const url of [t.url, t.url.replace(/^http:/i, "https:")]) {
          const res = await post(app, path, { ...base, notify: { url } });
          expect({ url, status: res.status, body: res.body }).toEqual({
            url,
            status: 400,
            body: { error: { code: "invalid.request", message: `notify.url: ${RULES[t.reason as keyof typeof RULES]}` } },
          });
        }
      }
      await sleep(200);
      expect(await requestsTo(host)).toEqual([]);
    });

    it(`ISSUE24-5 ${path}: no SCHEDULER_WEBHOOK_SECRET → 400 naming the secret, no run queued`, async () => {
      const { app, host } = await setup([{ content: "never" }]);
      const base =
        path === "/v1/runs" ? { agent_id: "main", message: "hi" } : { agent_id: "main", message: "hi", user_id: "u", room_id: "r" };
      for (const secret of [undefined, "not-a-whsec-secret"]) {
        const res = await post(
          app,
          path,
          { ...base, notify: { url: "https://ok.hook.test/in" } },
          { bindings: { ...env, SCHEDULER_WEBHOOK_SECRET: secret } },
        );
        expect({ status: res.status, body: res.body }).toEqual({
          status: 400,
          body: {
            error: {
              code: "invalid.request",
              message: "notify: completion webhooks need the SCHEDULER_WEBHOOK_SECRET secret (whsec_…), which is not set on this gateway",
            },
          },
        });
      }
      await sleep(200);
      expect(await requestsTo(host)).toEqual([]);
    });
  }
});

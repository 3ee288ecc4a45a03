/**
 * Job notifications (S3 §4 `notify`): when a job's run ends its output is POSTed to `notify.target`,
 * signed with the Standard Webhooks scheme, retried with the same webhook-id and body, given up after
 * `scheduler.notify.maxAttempts`, mirrored to D1 and recorded in the audit log — and, queued with the
 * run itself, not lost when the SessionDO crashes.
 */
import { createScheduledController, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { verifyWebhook, webhookKey } from "../../src/channels/standard-webhooks";
import type { GatewayConfig } from "../../src/config/schema";
import { createLogger } from "../../src/observability/logger";
import { createJob, JobWrite } from "../../src/scheduler/jobs";
import { runSchedulerTick } from "../../src/scheduler/tick";
import { webhookIdFor } from "../../src/scheduler/webhook-id";
import { endpointSecret } from "../../src/scheduler/webhook-keys";
import { runConfig } from "../support/config";
import type { ReceivedHook } from "../support/outbound";
import { ADMIN, appFor, call, until } from "../support/runs";

const NOTIFY = { notify: { maxAttempts: 3, retryBaseMs: 100, timeoutMs: 1000 } };
const CONFIG = runConfig("ok-notify.provider.test", { agentId: "notifier", agent: { tools: { allow: [] } }, scheduler: NOTIFY });
const app = appFor(CONFIG);

const host = (scenario: string) => `${scenario}-${crypto.randomUUID().slice(0, 8)}.hook.test`;

async function hooksAt(h: string): Promise<ReceivedHook[]> {
  return (await fetch(`https://mock.control/hooks?host=${h}`)).json();
}

/** Creates a webhook-notified job at 10:00 and fires its 11:00 slot; returns the firing's run id. */
async function fire(jobId: string, target: string, config: GatewayConfig = CONFIG): Promise<{ runId: string; sessionKey: string }> {
  const write = JobWrite.parse({
    job_id: jobId,
    agent_id: "notifier",
    schedule: "@every 1h",
    message: "daily numbers",
    mode: "isolated",
    enabled: true,
    notify: { channel: "webhook", target },
  });
  const created = await createJob(env.DB, write, new Date("2030-01-01T10:00:00Z"));
  if (!created.ok) throw new Error(JSON.stringify(created));
  await runSchedulerTick(
    env,
    createScheduledController({ scheduledTime: new Date("2030-01-01T11:00:00Z"), cron: "* * * * *" }),
    createLogger("error"),
    {
      config,
    },
  );
  const row = await env.DB.prepare("SELECT run_id, session_key FROM job_firings WHERE job_id = ?1")
    .bind(jobId)
    .first<{ run_id: string; session_key: string }>();
  if (!row?.run_id) throw new Error("not dispatched");
  return { runId: row.run_id, sessionKey: row.session_key };
}

async function notifyState(jobId: string) {
  return env.DB.prepare("SELECT notify_channel, notify_status, notify_attempts, notify_error FROM job_firings WHERE job_id = ?1")
    .bind(jobId)
    .first();
}

const today = () => new Date().toISOString().slice(0, 10);

async function auditOf(runId: string): Promise<{ event_type: string; actor: string; payload: Record<string, unknown> }[]> {
  const res = await call(app, "GET", `/api/admin/audit?agent_id=notifier&date=${today()}`, undefined, ADMIN);
  if (res.status !== 200) return [];
  return res.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .filter((e) => e.run_id === runId);
}

afterEach(async () => {
  await env.DB.batch([env.DB.prepare("DELETE FROM jobs"), env.DB.prepare("DELETE FROM job_firings")]);
});

describe("S3 §4 notify: webhook", () => {
  it("the run's output is POSTed once, signed with the Standard Webhooks scheme, with the firing's webhook-id", async () => {
    const target = host("ok");
    const { runId } = await fire("report", `https://${target}/hooks/jobs`);
    await until(async () => (await notifyState("report"))?.notify_status === "delivered");
    const [hook, ...more] = await hooksAt(target);
    expect(more).toEqual([]);
    expect(hook?.path).toBe("/hooks/jobs");
    expect(hook?.headers["webhook-id"]).toBe(await webhookIdFor("report", "2030-01-01T11:00:00.000Z"));
    expect(hook?.headers["content-type"]).toBe("application/json");
    // D-089: the operator's own key for this endpoint (GET /api/admin/webhook-secret?url= hands it out).
    const secret = await endpointSecret(env, { operator: true }, new URL(`https://${target}/hooks/jobs`));
    const verdict = await verifyWebhook(
      webhookKey(secret ?? undefined),
      {
        id: hook?.headers["webhook-id"] ?? null,
        timestamp: hook?.headers["webhook-timestamp"] ?? null,
        signature: hook?.headers["webhook-signature"] ?? null,
      },
      hook?.body ?? "",
      Math.floor(Date.now() / 1000),
    );
    expect(verdict).toEqual({ ok: true });
    expect(JSON.parse(hook?.body ?? "")).toEqual({
      type: "job.run.finished",
      timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      data: {
        job_id: "report",
        scheduled_for: "2030-01-01T11:00:00.000Z",
        run_id: runId,
        agent_id: "notifier",
        status: "completed",
        output: "pong",
        error: null,
        // Issue 21 §1: a job run that never called automation.complete says so.
        completion: { status: "missing" },
      },
    });
    expect(await notifyState("report")).toEqual({
      notify_channel: "webhook",
      notify_status: "delivered",
      notify_attempts: 1,
      notify_error: null,
    });
    // The firing and its delivery are in the audit log.
    await until(async () => (await auditOf(runId)).some((e) => e.event_type === "job.notify.delivered"));
    const audit = await auditOf(runId);
    expect(audit.find((e) => e.event_type === "run.created")).toMatchObject({
      actor: "scheduler",
      payload: { source: "job", job_id: "report", scheduled_for: "2030-01-01T11:00:00.000Z", missed: 0 },
    });
    expect(audit.find((e) => e.event_type === "job.notify.delivered")).toMatchObject({
      actor: "scheduler",
      payload: { job_id: "report", scheduled_for: "2030-01-01T11:00:00.000Z", channel: "webhook", attempt: 1, http_status: 200 },
    });
  });

  it("a failing receiver gets retries with the same webhook-id and body until it takes the delivery", async () => {
    const target = host("flaky");
    const { runId } = await fire("flaky-job", `https://${target}/in?fail=2`);
    await until(async () => (await notifyState("flaky-job"))?.notify_status === "delivered");
    const hooks = await hooksAt(target);
    expect(hooks.map((h) => h.answered)).toEqual([503, 503, 200]);
    expect(new Set(hooks.map((h) => h.headers["webhook-id"])).size).toBe(1);
    expect(new Set(hooks.map((h) => h.body)).size).toBe(1);
    expect(await notifyState("flaky-job")).toEqual({
      notify_channel: "webhook",
      notify_status: "delivered",
      notify_attempts: 3,
      notify_error: null,
    });
    await until(async () => (await auditOf(runId)).some((e) => e.event_type === "job.notify.delivered"));
    expect(
      (await auditOf(runId)).filter((e) => e.event_type.startsWith("job.notify")).map((e) => [e.event_type, e.payload.attempt]),
    ).toEqual([
      ["job.notify.retrying", 1],
      ["job.notify.retrying", 2],
      ["job.notify.delivered", 3],
    ]);
  });

  it("after scheduler.notify.maxAttempts failures the delivery is given up and says why", async () => {
    const target = host("down");
    await fire("down-job", `https://${target}/in`);
    await until(async () => (await notifyState("down-job"))?.notify_status === "failed");
    expect((await hooksAt(target)).map((h) => h.answered)).toEqual([503, 503, 503]);
    expect(await notifyState("down-job")).toEqual({
      notify_channel: "webhook",
      notify_status: "failed",
      notify_attempts: 3,
      notify_error: "receiver answered 503",
    });
  });

  it("a 4xx answer (other than 408 and 429) fails at once; redirects are never followed", async () => {
    const rejecting = host("reject");
    const moving = host("moved");
    await fire("rejected-job", `https://${rejecting}/in`);
    await fire("moved-job", `https://${moving}/in`);
    await until(async () => (await notifyState("rejected-job"))?.notify_status === "failed");
    await until(async () => (await notifyState("moved-job"))?.notify_status === "failed");
    expect(await notifyState("rejected-job")).toMatchObject({ notify_attempts: 1, notify_error: "receiver answered 400" });
    expect(await notifyState("moved-job")).toMatchObject({ notify_attempts: 1, notify_error: "redirect (301) not followed" });
    expect(await hooksAt(rejecting)).toHaveLength(1);
    expect(await hooksAt(moving)).toHaveLength(1);
  });

  it("a receiver that does not answer in scheduler.notify.timeoutMs counts as a failed attempt", async () => {
    const config = runConfig("ok-notify.provider.test", {
      agentId: "notifier",
      agent: { tools: { allow: [] } },
      scheduler: { notify: { maxAttempts: 1, retryBaseMs: 100, timeoutMs: 1000 } },
    });
    await fire("slow-job", `https://${host("slow")}/in`, config);
    await until(async () => (await notifyState("slow-job"))?.notify_status === "failed");
    expect(await notifyState("slow-job")).toMatchObject({ notify_attempts: 1, notify_error: "no answer within 1000 ms" });
  });

  it("a run that failed is notified too, with its status and error", async () => {
    const config = runConfig("error500-notify.provider.test", {
      agentId: "notifier",
      agent: { tools: { allow: [] } },
      runs: { providerAttempts: 1 },
      scheduler: NOTIFY,
    });
    const target = host("ok");
    const { runId } = await fire("failing-run", `https://${target}/in`, config);
    await until(async () => (await notifyState("failing-run"))?.notify_status === "delivered");
    const body = JSON.parse((await hooksAt(target))[0]?.body ?? "{}");
    const message = "the provider failed for moonshot:kimi-k1-128k (HTTP 500)";
    expect(body.data).toEqual({
      job_id: "failing-run",
      scheduled_for: "2030-01-01T11:00:00.000Z",
      run_id: runId,
      agent_id: "notifier",
      status: "failed",
      output: message,
      error: { code: "provider.unavailable", message },
      completion: { status: "missing" },
    });
  });

  it("nothing lost: the notification is queued with the run, so a crash before the run executes still delivers it", async () => {
    const target = host("ok");
    const { sessionKey } = await fire("crashing", `https://${target}/in`);
    const stub = env.SESSIONS.getByName(sessionKey);
    await runInDurableObject(stub, (_, state) => state.abort("simulated crash")).catch(() => {});
    await runDurableObjectAlarm(env.SESSIONS.getByName(sessionKey));
    await until(async () => (await notifyState("crashing"))?.notify_status === "delivered");
    expect(await hooksAt(target)).toHaveLength(1);
  });

  it("notify.channel none sends nothing and the firing says so", async () => {
    const write = JobWrite.parse({
      job_id: "quiet",
      agent_id: "notifier",
      schedule: "@every 1h",
      message: "m",
      mode: "isolated",
      enabled: true,
    });
    await createJob(env.DB, write, new Date("2030-01-01T10:00:00Z"));
    await runSchedulerTick(
      env,
      createScheduledController({ scheduledTime: new Date("2030-01-01T11:00:00Z"), cron: "* * * * *" }),
      createLogger("error"),
      {
        config: CONFIG,
      },
    );
    expect(await notifyState("quiet")).toEqual({ notify_channel: "none", notify_status: "none", notify_attempts: 0, notify_error: null });
    const { run_id } = (await env.DB.prepare("SELECT run_id FROM job_firings WHERE job_id = 'quiet'").first<{ run_id: string }>()) ?? {};
    await until(async () => (await call(app, "GET", `/api/admin/runs/${run_id}`, undefined, ADMIN)).body?.run.status === "completed");
    expect(
      (
        await runInDurableObject(env.SESSIONS.getByName(`agent:notifier:job:quiet:job:20300101T110000.000Z`), (_, state) =>
          // D-062: an object no notifying job ran in has no outbox at all (no row either way).
          state.storage.sql.exec("SELECT 1 FROM sqlite_master WHERE name = 'notify_outbox'").toArray().length === 0
            ? { n: 0 }
            : state.storage.sql.exec("SELECT COUNT(*) AS n FROM notify_outbox").one(),
        )
      ).n,
    ).toBe(0);
  });
});

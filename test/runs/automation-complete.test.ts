/**
 * Issue 21 §1: `automation.complete` finishes the run. A job created through the admin API fires; its run is told
 * its run_id inside L6 (noted in the manifest); the scripted model calls `automation.complete` with it, and the run
 * ends right after that tool round with the completion's outcome and summary — in `GET /v1/runs/{id}`, the
 * admin run view, the `run.completed` payload, the firing row and the webhook body. A repeated completion_id
 * changes nothing, another run's id is a tool error, and a job run that never calls it is recorded as `missing`.
 */
import { createScheduledController } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import type { GatewayConfig } from "../../src/config/schema";
import { createLogger } from "../../src/observability/logger";
import { runSchedulerTick } from "../../src/scheduler/tick";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { ReceivedHook, ScriptStep } from "../support/outbound";
import { ADMIN, type App, appFor, call, runDetail, until } from "../support/runs";

const AGENT = "auto";
const WIRE = "automation__complete";

/** A job-runner agent on its own scripted provider, offered automation.complete (the mode-driven offer is another item). */
function setup(): { host: string; config: GatewayConfig; app: App } {
  const host = uniqueHost("script");
  const config = runConfig(host, {
    agentId: AGENT,
    agent: { tools: { allow: ["automation.complete"] } },
    scheduler: { notify: { maxAttempts: 1 } },
  });
  return { host, config, app: appFor(config) };
}

/** Creates a webhook-notified job through the admin API and fires it; returns the firing's run id and hook host. */
async function fire(app: App, config: GatewayConfig, jobId: string): Promise<{ runId: string; hook: string }> {
  const hook = `${jobId}-${crypto.randomUUID().slice(0, 8)}.hook.test`;
  const created = await call(
    app,
    "POST",
    "/api/admin/jobs",
    {
      job_id: jobId,
      agent_id: AGENT,
      schedule: "@every 1h",
      message: "check the nightly build",
      mode: "isolated",
      enabled: true,
      notify: { channel: "webhook", target: `https://${hook}/hooks/jobs` },
    },
    ADMIN,
  );
  expect(created.status).toBe(201);
  const at = new Date(Date.now() + 2 * 3_600_000);
  await runSchedulerTick(env, createScheduledController({ scheduledTime: at, cron: "* * * * *" }), createLogger("error"), { config });
  const row = await env.DB.prepare("SELECT run_id FROM job_firings WHERE job_id = ?1").bind(jobId).first<{ run_id: string }>();
  if (!row?.run_id) throw new Error("the firing was not dispatched");
  return { runId: row.run_id, hook };
}

/** The admin view of the job's one firing. */
async function firing(app: App, jobId: string) {
  const res = await call(app, "GET", `/api/admin/jobs/${jobId}/firings`, undefined, ADMIN);
  expect(res.status).toBe(200);
  return res.body.firings[0];
}

async function hooksAt(h: string): Promise<ReceivedHook[]> {
  return (await fetch(`https://mock.control/hooks?host=${h}`)).json();
}

const completeCall = (id: string, args: Record<string, unknown>) => ({ id, name: WIRE, arguments: JSON.stringify(args) });

/**
 * The model's first reply is held (delay) until the test, having learnt the run id from the firing row, has scripted
 * the replies that name it: the first step is taken when its request arrives, so the rest can be set meanwhile.
 */
async function scriptAroundRunId(
  host: string,
  first: ScriptStep,
  rest: (runId: string) => ScriptStep[],
  fired: Promise<{ runId: string }>,
) {
  await scriptProvider(host, [{ ...first, delay_ms: 2_500 }]);
  const { runId } = await fired;
  await until(async () => (await bodiesSentTo(host)).length >= 1);
  await scriptProvider(host, rest(runId));
}

afterEach(async () => {
  await env.DB.batch([env.DB.prepare("DELETE FROM jobs"), env.DB.prepare("DELETE FROM job_firings")]);
});

/** A fired job whose model's rounds (after the first, which is held) are scripted knowing the run id; waits for the end. */
async function jobRun(jobId: string, first: ScriptStep, rest: (runId: string) => ScriptStep[]) {
  const { host, config, app } = setup();
  const fired = fire(app, config, jobId);
  await scriptAroundRunId(host, first, rest, fired);
  const { runId, hook } = await fired;
  // A job run belongs to no API caller: admins read its run view (S3 §5's shape) in the run detail.
  await until(async () => (await runDetail(app, runId)).run.status === "completed");
  return { runId, hook, host, app, detail: await runDetail(app, runId) };
}

/** The held first round: a completion naming another run (refused), so the run goes on to the scripted rounds. */
const WRONG_FIRST: ScriptStep = {
  content: null,
  tool_calls: [completeCall("call_wrong", { run_id: "run_other", completion_id: "c-0", outcome: "failed" })],
};
const SUMMARY = "Build 512 is green; 3 flaky tests quarantined.";
const recorded = (completion_id: string, outcome: string, summary: string | null) => ({
  status: "recorded",
  completion_id,
  outcome,
  summary,
  recorded_at: expect.any(String),
});

describe("issue 21 §1: automation.complete finishes the run", () => {
  it("ISSUE21-1 a job run gets its run_id inside L6, and the manifest notes it", async () => {
    const { runId, host, detail } = await jobRun("l6", WRONG_FIRST, (id) => [
      { content: null, tool_calls: [completeCall("call_ok", { run_id: id, completion_id: "c-1", outcome: "succeeded" })] },
    ]);
    const first = (await bodiesSentTo(host))[0];
    const l6 = first?.messages.at(-1);
    expect(l6.role).toBe("user");
    expect(l6.content).toBe(
      `=== AUTOMATION_RUN ===\nrun_id: ${runId}\nPass this run_id to automation.complete when the work is finished.\n=== END_AUTOMATION_RUN ===\n\ncheck the nightly build`,
    );
    // Only in L6: no hidden layer carries it.
    for (const m of first?.messages.slice(0, -1) ?? []) expect(JSON.stringify(m.content)).not.toContain(runId);
    const manifest = detail.manifests[0].manifest;
    expect(manifest.notes.filter((n: string) => n.startsWith("L6 preceded by automation_run"))).toHaveLength(1);
    expect(manifest.stack.at(-1)).toMatchObject({ layer: "L6", id: "user_input", bytes: "check the nightly build".length });
  }, 20_000);

  it("ISSUE21-1 automation.complete ends the run after its tool round with the outcome and summary: run view, run.completed, firing row, webhook body", async () => {
    const { runId, hook, host, app, detail } = await jobRun("nightly", WRONG_FIRST, (id) => [
      {
        content: "Finishing.",
        tool_calls: [completeCall("call_ok", { run_id: id, completion_id: "c-1", outcome: "succeeded", summary: SUMMARY })],
      },
      // Never requested: the run ends after the completing round.
      { content: "I should not be asked again." },
    ]);
    const completion = recorded("c-1", "succeeded", SUMMARY);
    expect(detail.run).toMatchObject({ id: runId, source: "job", status: "completed", output: SUMMARY });
    expect(detail.run.completion).toEqual(completion);
    // Two model calls: the round after the completion never happens.
    expect(await bodiesSentTo(host)).toHaveLength(2);
    const done = detail.events.filter((e: { event_type: string }) => e.event_type === "run.completed");
    expect(done).toHaveLength(1);
    expect(done[0].payload.completion).toEqual(completion);
    await until(async () => (await firing(app, "nightly")).completion !== undefined);
    expect(await firing(app, "nightly")).toMatchObject({ run_id: runId, status: "dispatched", run_status: "completed", completion });
    await until(async () => (await hooksAt(hook)).length === 1);
    const body = JSON.parse((await hooksAt(hook))[0]?.body ?? "");
    expect(body.data).toMatchObject({ run_id: runId, status: "completed", output: SUMMARY, error: null });
    expect(body.data.completion).toEqual(completion);
  }, 20_000);

  it("ISSUE21-1 a run_id that is not this run is refused as a tool error, and the run goes on", async () => {
    const { runId, detail } = await jobRun("wrong-id", WRONG_FIRST, (id) => [
      { content: null, tool_calls: [completeCall("call_ok", { run_id: id, completion_id: "c-1", outcome: "needs_human" })] },
    ]);
    const wrong = detail.events.find((e: any) => e.event_type === "tool.result" && e.payload.tool_call_id === "call_wrong");
    expect(wrong.payload).toMatchObject({
      ok: false,
      error: { code: "invalid.request", message: "run run_other is not this run; pass the run_id given in this run's instructions" },
    });
    // Nothing was recorded for the refused call: the run's completion is the later, right one (no summary → the outcome).
    expect(detail.run).toMatchObject({ id: runId, status: "completed", output: "needs_human" });
    expect(detail.run.completion).toEqual(recorded("c-1", "needs_human", null));
  }, 20_000);

  it("ISSUE21-1 a repeated completion_id changes nothing", async () => {
    const { host, detail, app } = await jobRun("retry", WRONG_FIRST, (id) => [
      {
        content: null,
        tool_calls: [
          completeCall("call_ok", { run_id: id, completion_id: "c-1", outcome: "succeeded", summary: SUMMARY }),
          // A retry of the same completion in the same round, and one with other content under the same id.
          completeCall("call_retry", { run_id: id, completion_id: "c-1", outcome: "succeeded", summary: SUMMARY }),
          completeCall("call_other", { run_id: id, completion_id: "c-1", outcome: "failed", summary: "changed my mind" }),
        ],
      },
    ]);
    const results = detail.run.trace.tool_execution_results;
    const retry = results.find((r: { tool_call_id: string }) => r.tool_call_id === "call_retry");
    expect(JSON.parse(retry.output)).toMatchObject({
      completion_id: "c-1",
      tool_call_id: "call_ok",
      outcome: "succeeded",
      duplicate: true,
    });
    const other = results.find((r: { tool_call_id: string }) => r.tool_call_id === "call_other");
    expect(other.error).toBe("completion_id c-1 was already recorded with a different run or outcome; use a new completion_id");
    const first = recorded("c-1", "succeeded", SUMMARY);
    expect(detail.run).toMatchObject({ status: "completed", output: SUMMARY, completion: first });
    expect(detail.events.filter((e: { event_type: string }) => e.event_type === "run.completed")).toHaveLength(1);
    expect(await bodiesSentTo(host)).toHaveLength(2);
    await until(async () => (await firing(app, "retry")).completion !== undefined);
    expect((await firing(app, "retry")).completion).toEqual(first);
  }, 20_000);

  it("ISSUE21-1 a job run that ends without calling automation.complete is recorded as completion missing", async () => {
    const { host, config, app } = setup();
    await scriptProvider(host, [{ content: "All done, I think." }]);
    const { runId, hook } = await fire(app, config, "forgetful");
    await until(async () => (await runDetail(app, runId)).run.status === "completed");
    const detail = await runDetail(app, runId);
    expect(detail.run).toMatchObject({ status: "completed", output: "All done, I think.", completion: { status: "missing" } });
    const done = detail.events.find((e: { event_type: string }) => e.event_type === "run.completed");
    expect(done.payload.completion).toEqual({ status: "missing" });
    await until(async () => (await firing(app, "forgetful")).completion !== undefined);
    expect(await firing(app, "forgetful")).toMatchObject({ run_id: runId, run_status: "completed", completion: { status: "missing" } });
    // The webhook body says so too: the run recorded none.
    await until(async () => (await hooksAt(hook)).length === 1);
    const body = JSON.parse((await hooksAt(hook))[0]?.body ?? "");
    expect(body.data.status).toBe("completed");
    expect(body.data.completion).toEqual({ status: "missing" });
  }, 20_000);
});

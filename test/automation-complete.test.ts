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
import type { GatewayConfig } from "../src/config/schema";
import { createLogger } from "../src/observability/logger";
import { runSchedulerTick } from "../src/scheduler/tick";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "./support/config";
import type { ReceivedHook, ScriptStep } from "./support/outbound";
import { ADMIN, type App, appFor, call, runDetail, until } from "./support/runs";

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
  await scriptProvider(host, [{ ...first, delay_ms: 1_500 }]);
  const { runId } = await fired;
  await until(async () => (await bodiesSentTo(host)).length >= 1);
  await scriptProvider(host, rest(runId));
}

afterEach(async () => {
  await env.DB.batch([env.DB.prepare("DELETE FROM jobs"), env.DB.prepare("DELETE FROM job_firings")]);
});

describe("issue 21 §1: automation.complete finishes the run", () => {
  it("ISSUE21-1 a job run is told its run_id in L6 (noted in the manifest); automation.complete ends it with that outcome and summary everywhere", async () => {
    const { host, config, app } = setup();
    const fired = fire(app, config, "nightly");
    const summary = "Build 512 is green; 3 flaky tests quarantined.";
    await scriptAroundRunId(
      host,
      // Round 1: another run's id is refused as a tool error and the run goes on.
      { content: null, tool_calls: [completeCall("call_wrong", { run_id: "run_not_this_one", completion_id: "c-0", outcome: "failed" })] },
      (runId) => [
        // Round 2: the right id, then the same completion_id again in the same round (a retry): nothing changes.
        {
          content: "Finishing.",
          tool_calls: [
            completeCall("call_ok", { run_id: runId, completion_id: "c-1", outcome: "succeeded", summary }),
            completeCall("call_retry", { run_id: runId, completion_id: "c-1", outcome: "succeeded", summary }),
          ],
        },
        // Never requested: the run ends after the completing round.
        { content: "I should not be asked again." },
      ],
      fired,
    );
    const { runId, hook } = await fired;

    // The run view (S3 §5's shape; a job run belongs to no API caller, so admins read it in the run detail).
    await until(async () => (await runDetail(app, runId)).run.status === "completed");
    const detail = await runDetail(app, runId);
    const view = detail.run;
    const completion = { status: "recorded", completion_id: "c-1", outcome: "succeeded", summary, recorded_at: expect.any(String) };
    expect(view).toMatchObject({ id: runId, source: "job", status: "completed", output: summary, completion });
    expect(view.trace.tool_execution_results.map((r: { tool_call_id: string; error: string }) => [r.tool_call_id, r.error])).toEqual([
      ["call_wrong", "run run_not_this_one is not this run; pass the run_id given in this run's instructions"],
      ["call_ok", ""],
      ["call_retry", ""],
    ]);
    expect(view.completion).toEqual(completion);

    // The provider saw the run id inside L6 (the user message), and was asked exactly twice.
    const bodies = await bodiesSentTo(host);
    expect(bodies).toHaveLength(2);
    const l6 = bodies[0]?.messages.at(-1);
    expect(l6.role).toBe("user");
    expect(l6.content).toBe(
      `=== AUTOMATION_RUN ===\nrun_id: ${runId}\nPass this run_id to automation.complete when the work is finished.\n=== END_AUTOMATION_RUN ===\n\ncheck the nightly build`,
    );
    for (const m of bodies[0]?.messages.slice(0, -1) ?? []) expect(m.content).not.toContain(runId);
    const notes: string[] = detail.manifests[0].manifest.notes;
    expect(notes.filter((n) => n.startsWith("L6 preceded by automation_run"))).toHaveLength(1);

    // The run.completed payload.
    const done = detail.events.find((e: { event_type: string }) => e.event_type === "run.completed");
    expect(done.payload.completion).toEqual(completion);

    // The firing row (admin API) and the webhook body.
    await until(async () => (await firing(app, "nightly")).completion !== undefined);
    expect(await firing(app, "nightly")).toMatchObject({ run_id: runId, run_status: "completed", completion });
    await until(async () => (await hooksAt(hook)).length === 1);
    const body = JSON.parse((await hooksAt(hook))[0]?.body ?? "");
    expect(body.data).toMatchObject({ run_id: runId, status: "completed", output: summary, completion });

    // The repeated completion_id recorded nothing more: one completion for the run.
    expect(detail.events.filter((e: { event_type: string }) => e.event_type === "run.completed")).toHaveLength(1);
    const retry = view.trace.tool_execution_results.find((r: { tool_call_id: string }) => r.tool_call_id === "call_retry");
    expect(JSON.parse(retry.output)).toMatchObject({ completion_id: "c-1", tool_call_id: "call_ok", duplicate: true });
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
    // The webhook body carries no completion: the run recorded none.
    await until(async () => (await hooksAt(hook)).length === 1);
    const body = JSON.parse((await hooksAt(hook))[0]?.body ?? "");
    expect(body.data.status).toBe("completed");
    expect(body.data).not.toHaveProperty("completion");
  }, 20_000);
});

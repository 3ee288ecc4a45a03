/**
 * The cron tick (S3 §4, DESIGN "Scheduler") at chosen times, through `createScheduledController`:
 * due and not due, disabled, catch-up after a long gap, one-shots past and future, overlapping and
 * retried ticks (each firing dispatched exactly once), take-over of a dead tick's claims, the bound
 * per tick, isolated and main_like sessions, and the Worker's `scheduled()` entry with its heartbeat.
 */
import { createScheduledController, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import type { GatewayConfig } from "../../src/config/schema";
import worker from "../../src/index";
import { createLogger } from "../../src/observability/logger";
import { createJob, JobWrite } from "../../src/scheduler/jobs";
import { type Dispatcher, type Firing, runSchedulerTick, sessionDispatcher } from "../../src/scheduler/tick";
import type { SessionDO } from "../../src/sessions/SessionDO";
import { runConfig } from "../support/config";
import { ADMIN, appFor, call, runDetail, until } from "../support/runs";

const CONFIG = runConfig("ok-sched.provider.test", { agent: { tools: { allow: [] } } });
const quiet = createLogger("error");

/** A job written straight to D1 as if created at `createdAt`. */
async function addJob(job: Partial<JobWrite> & { job_id: string; schedule: string }, createdAt: string) {
  const write = JobWrite.parse({ agent_id: "main", message: `run ${job.job_id}`, mode: "isolated", enabled: true, ...job });
  const r = await createJob(env.DB, write, new Date(createdAt));
  if (!r.ok) throw new Error(`createJob refused: ${JSON.stringify(r)}`);
  return r.job;
}

/** A dispatcher that records firings and answers with fake run ids. */
function recorder(): { dispatch: Dispatcher; fired: Firing[] } {
  const fired: Firing[] = [];
  return {
    fired,
    dispatch: async (f) => {
      fired.push(f);
      return { ok: true, runId: `run_fake_${fired.length}`, sessionKey: `agent:${f.agentId}:main` };
    },
  };
}

const tick = (at: string, dispatch?: Dispatcher, config: GatewayConfig = CONFIG) =>
  runSchedulerTick(env, createScheduledController({ scheduledTime: new Date(at), cron: "* * * * *" }), quiet, {
    config,
    ...(dispatch ? { dispatch } : {}),
  });

async function firings(jobId: string) {
  const rows = await env.DB.prepare(
    "SELECT scheduled_for, status, missed, attempts, run_id, session_key, error FROM job_firings WHERE job_id = ?1 ORDER BY scheduled_for",
  )
    .bind(jobId)
    .all();
  return rows.results;
}

async function jobState(jobId: string) {
  return env.DB.prepare("SELECT enabled, next_run_ms, last_fired_at FROM jobs WHERE job_id = ?1").bind(jobId).first();
}

const ms = (iso: string) => new Date(iso).getTime();

afterEach(async () => {
  await env.DB.batch([env.DB.prepare("DELETE FROM jobs"), env.DB.prepare("DELETE FROM job_firings")]);
});

describe("scheduled()", () => {
  it("records the tick's scheduled time as the cron heartbeat in D1", async () => {
    const first = createScheduledController({ scheduledTime: new Date("2026-11-25T10:00:00Z"), cron: "* * * * *" });
    await worker.scheduled(first, env);
    const second = createScheduledController({ scheduledTime: new Date("2026-11-25T10:01:00Z"), cron: "* * * * *" });
    await worker.scheduled(second, env);
    const rows = await env.DB.prepare("SELECT name, last_at, detail FROM gateway_heartbeats").all();
    expect(rows.results).toEqual([{ name: "cron", last_at: "2026-11-25T10:01:00.000Z", detail: '{"cron":"* * * * *"}' }]);
  });
});

describe("S3 §4 / DESIGN Scheduler: when jobs fire", () => {
  it("an @every job fires when its slot has come, not before, and moves to the next slot", async () => {
    await addJob({ job_id: "hourly", schedule: "@every 1h" }, "2030-01-01T10:00:00Z");
    const r = recorder();
    expect(await tick("2030-01-01T10:59:00Z", r.dispatch)).toMatchObject({ due: 0, claimed: 0, dispatched: 0 });
    expect(r.fired).toEqual([]);
    expect(await tick("2030-01-01T11:00:00Z", r.dispatch)).toMatchObject({ due: 1, claimed: 1, dispatched: 1 });
    expect(r.fired).toEqual([
      {
        jobId: "hourly",
        scheduledFor: "2030-01-01T11:00:00.000Z",
        agentId: "main",
        message: "run hourly",
        mode: "isolated",
        notifyChannel: "none",
        notifyTarget: "",
        missed: 0,
        attempts: 1,
      },
    ]);
    expect(await jobState("hourly")).toEqual({
      enabled: 1,
      next_run_ms: ms("2030-01-01T12:00:00Z"),
      last_fired_at: "2030-01-01T11:00:00.000Z",
    });
    expect(await firings("hourly")).toEqual([
      {
        scheduled_for: "2030-01-01T11:00:00.000Z",
        status: "dispatched",
        missed: 0,
        attempts: 1,
        run_id: "run_fake_1",
        session_key: "agent:main:main",
        error: null,
      },
    ]);
  });

  it("disabled jobs never fire", async () => {
    await addJob({ job_id: "off", schedule: "@every 1m", enabled: false }, "2030-01-01T10:00:00Z");
    await addJob({ job_id: "off-once", schedule: "2030-01-01T10:05:00Z", enabled: false }, "2030-01-01T10:00:00Z");
    const r = recorder();
    for (const at of ["2030-01-01T10:01:00Z", "2030-01-01T10:05:00Z", "2031-06-01T00:00:00Z"]) await tick(at, r.dispatch);
    expect(r.fired).toEqual([]);
    expect(await firings("off")).toEqual([]);
    expect(await firings("off-once")).toEqual([]);
  });

  it("missed windows are not replayed: after a long gap an @every job fires once, for the latest slot, and resumes on schedule", async () => {
    await addJob({ job_id: "gap", schedule: "@every 1h" }, "2030-01-01T10:00:00Z");
    const r = recorder();
    // The gateway was down from 10:30 to 15:30: slots 11:00 … 15:00 passed.
    await tick("2030-01-01T15:30:00Z", r.dispatch);
    expect(r.fired.map((f) => [f.scheduledFor, f.missed])).toEqual([["2030-01-01T15:00:00.000Z", 4]]);
    expect(await jobState("gap")).toEqual({
      enabled: 1,
      next_run_ms: ms("2030-01-01T16:00:00Z"),
      last_fired_at: "2030-01-01T15:00:00.000Z",
    });
    await tick("2030-01-01T15:31:00Z", r.dispatch);
    await tick("2030-01-01T15:59:00Z", r.dispatch);
    expect(r.fired).toHaveLength(1);
    await tick("2030-01-01T16:00:00Z", r.dispatch);
    expect(r.fired.map((f) => [f.scheduledFor, f.missed])).toEqual([
      ["2030-01-01T15:00:00.000Z", 4],
      ["2030-01-01T16:00:00.000Z", 0],
    ]);
  });

  it("slots are anchored where the schedule was set: @every 90s fires at the first tick after each slot", async () => {
    await addJob({ job_id: "ninety", schedule: "@every 90s" }, "2030-01-01T10:00:00Z");
    const r = recorder();
    for (let m = 1; m <= 4; m++) await tick(`2030-01-01T10:0${m}:00Z`, r.dispatch);
    // Slots 10:01:30 and 10:03:00 (and 10:04:30 is still ahead).
    expect(r.fired.map((f) => f.scheduledFor)).toEqual(["2030-01-01T10:01:30.000Z", "2030-01-01T10:03:00.000Z"]);
  });

  it("a one-shot in the future waits; one whose time passed while the gateway was down runs once and is then disabled", async () => {
    await addJob({ job_id: "once", schedule: "2030-01-01T12:00:00Z" }, "2030-01-01T10:00:00Z");
    const r = recorder();
    await tick("2030-01-01T11:59:00Z", r.dispatch);
    expect(r.fired).toEqual([]);
    expect(await jobState("once")).toEqual({ enabled: 1, next_run_ms: ms("2030-01-01T12:00:00Z"), last_fired_at: null });
    // Down from 11:59 to 14:00.
    await tick("2030-01-01T14:00:00Z", r.dispatch);
    expect(r.fired.map((f) => [f.jobId, f.scheduledFor, f.missed])).toEqual([["once", "2030-01-01T12:00:00.000Z", 0]]);
    expect(await jobState("once")).toEqual({ enabled: 0, next_run_ms: null, last_fired_at: "2030-01-01T12:00:00.000Z" });
    await tick("2030-01-01T15:00:00Z", r.dispatch);
    await tick("2031-01-01T00:00:00Z", r.dispatch);
    expect(r.fired).toHaveLength(1);
  });
});

describe("S3 §4 / DESIGN Scheduler: each firing is dispatched exactly once", () => {
  it("two overlapping ticks at the same time dispatch each firing once", async () => {
    for (const id of ["a", "b", "c"]) await addJob({ job_id: `overlap-${id}`, schedule: "@every 1h" }, "2030-01-01T10:00:00Z");
    const fired: string[] = [];
    const slow: Dispatcher = async (f) => {
      fired.push(`${f.jobId}@${f.scheduledFor}`);
      await new Promise((r) => setTimeout(r, 30));
      return { ok: true, runId: `run_${f.jobId}`, sessionKey: "agent:main:main" };
    };
    const [x, y] = await Promise.all([tick("2030-01-01T11:00:00Z", slow), tick("2030-01-01T11:00:00Z", slow)]);
    expect(fired.sort()).toEqual([
      "overlap-a@2030-01-01T11:00:00.000Z",
      "overlap-b@2030-01-01T11:00:00.000Z",
      "overlap-c@2030-01-01T11:00:00.000Z",
    ]);
    expect((x?.dispatched ?? 0) + (y?.dispatched ?? 0)).toBe(3);
  });

  it("overlapping ticks a minute apart claim a catch-up firing once", async () => {
    await addJob({ job_id: "late", schedule: "@every 1h" }, "2030-01-01T10:00:00Z");
    const r = recorder();
    await Promise.all([tick("2030-01-01T13:10:00Z", r.dispatch), tick("2030-01-01T13:11:00Z", r.dispatch)]);
    expect(r.fired.map((f) => f.scheduledFor)).toEqual(["2030-01-01T13:00:00.000Z"]);
  });

  it("a retried tick (same scheduled time, after the first completed) dispatches nothing again", async () => {
    await addJob({ job_id: "retry", schedule: "@every 5m" }, "2030-01-01T10:00:00Z");
    await addJob({ job_id: "retry-once", schedule: "2030-01-01T10:05:00Z" }, "2030-01-01T10:00:00Z");
    const r = recorder();
    expect(await tick("2030-01-01T10:05:00Z", r.dispatch)).toMatchObject({ dispatched: 2 });
    expect(await tick("2030-01-01T10:05:00Z", r.dispatch)).toMatchObject({ due: 0, claimed: 0, recovered: 0, dispatched: 0 });
    expect(r.fired.map((f) => f.jobId).sort()).toEqual(["retry", "retry-once"]);
  });

  it("a claim left by a tick that died is taken over after the lease, and the SessionDO dedupes the firing", async () => {
    await addJob({ job_id: "crash", schedule: "@every 1h" }, "2030-01-01T10:00:00Z");
    const real = sessionDispatcher(env, CONFIG);
    // The first tick hands the firing over, then dies before recording it.
    const dying: Dispatcher = async (f) => {
      await real(f);
      throw new Error("isolate lost");
    };
    expect(await tick("2030-01-01T11:00:00Z", dying)).toMatchObject({ claimed: 1, dispatched: 0, deferred: 1 });
    expect(await firings("crash")).toMatchObject([{ status: "claimed", attempts: 1, run_id: null }]);
    // Within the lease nobody touches the claim …
    expect(await tick("2030-01-01T11:01:00Z")).toMatchObject({ recovered: 0, dispatched: 0 });
    // … after it, the next tick takes it over and hands it over again: the SessionDO answers with the same run.
    expect(await tick("2030-01-01T11:03:00Z")).toMatchObject({ recovered: 1, dispatched: 1 });
    const [row] = (await firings("crash")) as { status: string; attempts: number; run_id: string; session_key: string }[];
    expect(row).toMatchObject({ status: "dispatched", attempts: 2, session_key: "agent:main:job:crash:job:20300101T110000.000Z" });
    const stub = env.SESSIONS.getByName(row?.session_key as string);
    const runs = await runInDurableObject(stub, (_, state) =>
      state.storage.sql.exec("SELECT id, dispatch_key, source FROM runs").toArray(),
    );
    expect(runs).toEqual([{ id: row?.run_id, dispatch_key: "job:crash:2030-01-01T11:00:00.000Z", source: "job" }]);
    await until(async () => (await runDetail(appFor(CONFIG), row?.run_id as string)).run.status === "completed");
  });

  it("a firing that cannot be handed over is given up after 5 attempts, and its job keeps its schedule", async () => {
    await addJob({ job_id: "broken", schedule: "@every 1h" }, "2030-01-01T10:00:00Z");
    const failing: Dispatcher = async () => {
      throw new Error("down");
    };
    await tick("2030-01-01T11:00:00Z", failing);
    for (let i = 1; i <= 5; i++) await tick(`2030-01-01T11:${String(i * 3).padStart(2, "0")}:00Z`, failing);
    expect(await firings("broken")).toMatchObject([
      { scheduled_for: "2030-01-01T11:00:00.000Z", status: "failed", attempts: 6, error: "not handed over after 5 attempts" },
    ]);
    expect(await jobState("broken")).toMatchObject({ enabled: 1, next_run_ms: ms("2030-01-01T12:00:00Z") });
  });

  it("a tick is bounded: at most scheduler.maxFiringsPerTick firings, oldest first; the rest fire on the next ticks", async () => {
    for (let i = 0; i < 5; i++) await addJob({ job_id: `bulk-${i}`, schedule: "@every 1h" }, "2030-01-01T10:00:00Z");
    const config = runConfig("ok-sched.provider.test", { scheduler: { maxFiringsPerTick: 2 } });
    const r = recorder();
    expect(await tick("2030-01-01T12:00:00Z", r.dispatch, config)).toMatchObject({ due: 2, dispatched: 2 });
    expect(await tick("2030-01-01T12:01:00Z", r.dispatch, config)).toMatchObject({ due: 2, dispatched: 2 });
    expect(await tick("2030-01-01T12:02:00Z", r.dispatch, config)).toMatchObject({ due: 1, dispatched: 1 });
    expect(r.fired.map((f) => f.jobId)).toEqual(["bulk-0", "bulk-1", "bulk-2", "bulk-3", "bulk-4"]);
  });

  it("a firing whose agent left the configuration is recorded as skipped, with the reason", async () => {
    await addJob({ job_id: "ghost", schedule: "@every 1h", agent_id: "ghost" }, "2030-01-01T10:00:00Z");
    expect(await tick("2030-01-01T11:00:00Z")).toMatchObject({ skipped: 1, dispatched: 0 });
    expect(await firings("ghost")).toMatchObject([{ status: "skipped", error: 'agent "ghost" is not in the configuration', run_id: null }]);
  });
});

describe("S3 §4 / DESIGN Scheduler: where a firing runs", () => {
  const app = appFor(CONFIG);

  it("isolated → a fresh job session per firing; the run is an automation run recorded with its firing", async () => {
    await addJob({ job_id: "iso", schedule: "@every 1h", message: "status report" }, "2030-01-01T10:00:00Z");
    await tick("2030-01-01T11:00:00Z");
    await tick("2030-01-01T12:00:00Z");
    const rows = (await firings("iso")) as { run_id: string; session_key: string; status: string }[];
    expect(rows.map((f) => [f.status, f.session_key])).toEqual([
      ["dispatched", "agent:main:job:iso:job:20300101T110000.000Z"],
      ["dispatched", "agent:main:job:iso:job:20300101T120000.000Z"],
    ]);
    for (const f of rows) {
      await until(async () => (await runDetail(app, f.run_id)).run.status === "completed");
      const detail = await runDetail(app, f.run_id);
      expect(detail.run).toMatchObject({ source: "job", status: "completed", output: "pong" });
      const created = detail.events.find((e: { event_type: string }) => e.event_type === "run.created");
      expect(created.payload).toMatchObject({ source: "job", job_id: "iso", scheduled_for: expect.any(String), missed: 0 });
      // S5: a scheduled job's run is in automation mode (L5 tasks/automation); its channel policy is api_client.
      const stack = detail.manifests[0].manifest.stack.map((e: { layer: string; id: string }) => `${e.layer}:${e.id}`);
      expect(stack).toContain("L5:tasks/automation");
      expect(stack).toContain("L3:channels/api_client");
    }
    expect(rows[0]?.run_id).not.toBe(rows[1]?.run_id);
  });

  it("main_like → the agent's main session, every firing in the same conversation", async () => {
    await addJob({ job_id: "mainlike", schedule: "@every 1h", mode: "main_like" }, "2030-01-01T10:00:00Z");
    await tick("2030-01-01T11:00:00Z");
    await tick("2030-01-01T12:00:00Z");
    const rows = (await firings("mainlike")) as { run_id: string; session_key: string }[];
    expect(rows.map((f) => f.session_key)).toEqual(["agent:main:main", "agent:main:main"]);
    for (const f of rows) await until(async () => (await runDetail(app, f.run_id)).run.status === "completed");
    // The D1 run index is shipped within a second of a run's end (issue 23's shipping window), not with it.
    const listRuns = () => call(app, "GET", "/api/admin/runs?agent_id=main&limit=200", undefined, ADMIN);
    const ids = (body: { runs: { run_id: string }[] }) => new Set(body.runs.map((r) => r.run_id));
    await until(async () => {
      const listedNow = ids((await listRuns()).body);
      return rows.every((f) => listedNow.has(f.run_id));
    });
    const listed = await listRuns();
    const inMain = listed.body.runs.filter(
      (r: { session_key: string; source: string }) => r.session_key === "agent:main:main" && r.source === "job",
    );
    expect(inMain.map((r: { run_id: string }) => r.run_id).sort()).toEqual(rows.map((f) => f.run_id).sort());
  });

  it("nothing lost: a firing handed over survives an abrupt crash of its SessionDO and runs", async () => {
    await addJob({ job_id: "survive", schedule: "@every 1h" }, "2030-01-01T10:00:00Z");
    await tick("2030-01-01T11:00:00Z");
    const [row] = (await firings("survive")) as { run_id: string; session_key: string }[];
    const stub = env.SESSIONS.getByName(row?.session_key as string) as DurableObjectStub<SessionDO>;
    await runInDurableObject(stub, (_, state) => state.abort("simulated crash")).catch(() => {});
    const fresh = env.SESSIONS.getByName(row?.session_key as string);
    await runDurableObjectAlarm(fresh);
    await until(async () => (await runDetail(app, row?.run_id as string)).run.status === "completed");
  });
});

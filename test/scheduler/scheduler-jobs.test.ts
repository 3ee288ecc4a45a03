/**
 * Scheduler jobs through the admin API (S3 §4; src/http/admin/jobs.ts over src/scheduler/jobs.ts): the job record's
 * exact fields and defaults, the two accepted schedule forms (cron refused on create and on update), validation with
 * exact messages, PUT's replace semantics and next-run bookkeeping (a new schedule re-anchors, re-enabling skips the
 * missed windows, a fired one-shot stays fired), DELETE with its firings, the firings list, auth, and the audit trail.
 * Runs against the real local D1 and SessionDO; the clock is the real one, so expectations are computed from the
 * timestamps the API returns.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { encodeCursor } from "../../src/http/admin/paging";
import { runConfig, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, call, until } from "../support/runs";
import { auditBacklog } from "../support/session";

const app = appFor(runConfig(uniqueHost("ok")));

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const ACCEPTED_FORMS = 'use "@every <duration>" (e.g. "@every 5m", at least 1m) or a one-shot RFC 3339 time (e.g. "2026-02-18T09:00:00Z")';

/** A job id no other test uses. */
const jobId = (name: string) => `sj-${name}-${crypto.randomUUID().slice(0, 8)}`;

/** A minimal valid write body (the S3 required fields only). */
const write = (id: string, o: Record<string, unknown> = {}) => ({
  job_id: id,
  agent_id: "main",
  schedule: "@every 1h",
  message: "Generate status report",
  mode: "isolated",
  enabled: true,
  ...o,
});

const plus = (iso: string, ms: number) => new Date(Date.parse(iso) + ms).toISOString();
const today = () => new Date().toISOString().slice(0, 10);

const admin = (method: string, path: string, body?: unknown, on: App = app) => call(on, method, path, body, ADMIN);
const jobPath = (id: string) => `/api/admin/jobs/${id}`;

/** Creates a job and returns the record (fails the test unless 201). */
async function create(body: Record<string, unknown>, on: App = app): Promise<any> {
  const res = await admin("POST", "/api/admin/jobs", body, on);
  expect(res.status, res.text).toBe(201);
  return res.body;
}

/** A request with a raw body, headers and bindings of the test's choosing. */
async function raw(path: string, init: RequestInit, bindings: Record<string, unknown> = env as never) {
  const res = await app.request(`https://gateway.test${path}`, init, bindings);
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

/** An admin JSON request against a modified environment. */
const callWithEnv = (bindings: Record<string, unknown>, method: string, path: string, body: unknown) =>
  raw(
    path,
    { method, headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" }, body: JSON.stringify(body) },
    bindings,
  );

function expectError(res: { status: number; body: unknown }, status: number, code: string, message: string): void {
  expect({ status: res.status, body: res.body }).toEqual({ status, body: { error: { code, message } } });
}

/** Inserts a firing row directly (what a tick would have written). */
async function insertFiring(jobIdValue: string, scheduledFor: string, o: Record<string, unknown> = {}): Promise<void> {
  const row = {
    job_id: jobIdValue,
    scheduled_for: scheduledFor,
    agent_id: "main",
    tick: "tick_test",
    status: "dispatched",
    message: "Generate status report",
    mode: "isolated",
    notify_target: "",
    missed: 0,
    claimed_at: scheduledFor,
    attempts: 1,
    run_id: null,
    session_key: null,
    dispatched_at: null,
    error: null,
    notify_channel: "none",
    notify_status: "none",
    notify_attempts: 0,
    notify_error: null,
    notified_at: null,
    ...o,
  };
  const cols = Object.keys(row);
  await env.DB.prepare(`INSERT INTO job_firings (${cols.join(", ")}) VALUES (${cols.map((_, i) => `?${i + 1}`).join(", ")})`)
    .bind(...Object.values(row))
    .run();
}

afterEach(async () => {
  await env.DB.batch([env.DB.prepare("DELETE FROM jobs"), env.DB.prepare("DELETE FROM job_firings")]);
});

describe("S3 §4 job records: create, read, list", () => {
  it("S3 §4: POST creates a job with exactly the S3 fields (notify none, timezone UTC by default) plus next_run_at and last_fired_at", async () => {
    const id = jobId("create");
    const before = Date.now();
    const res = await admin("POST", "/api/admin/jobs", write(id));
    const after = Date.now();
    expect(res.status).toBe(201);
    const createdAt = res.body.created_at;
    expect(createdAt).toMatch(ISO_MS);
    expect(Date.parse(createdAt)).toBeGreaterThanOrEqual(before);
    expect(Date.parse(createdAt)).toBeLessThanOrEqual(after);
    const expected = {
      job_id: id,
      agent_id: "main",
      schedule: "@every 1h",
      message: "Generate status report",
      mode: "isolated",
      notify: { channel: "none", target: "" },
      enabled: true,
      timezone: "UTC",
      created_at: createdAt,
      updated_at: createdAt,
      next_run_at: plus(createdAt, HOUR),
      last_fired_at: null,
    };
    expect(res.body).toStrictEqual(expected);
    expect(Object.keys(res.body)).toEqual(Object.keys(expected));

    const got = await admin("GET", jobPath(id));
    expect(got.status).toBe(200);
    expect(got.body).toStrictEqual(expected);
  });

  it("S3 §4: every S3 field given explicitly is stored as given (main_like, webhook notify, an IANA zone)", async () => {
    const id = jobId("full");
    const job = await create(
      write(id, {
        mode: "main_like",
        schedule: "@every 1h30m",
        notify: { channel: "webhook", target: "https://ok.hook.test/x" },
        timezone: "Europe/Berlin",
      }),
    );
    expect(job).toStrictEqual({
      job_id: id,
      agent_id: "main",
      schedule: "@every 1h30m",
      message: "Generate status report",
      mode: "main_like",
      notify: { channel: "webhook", target: "https://ok.hook.test/x" },
      enabled: true,
      timezone: "Europe/Berlin",
      created_at: job.created_at,
      updated_at: job.created_at,
      next_run_at: plus(job.created_at, 90 * MINUTE),
      last_fired_at: null,
    });
  });

  it("S3 §4: a one-shot RFC3339 schedule with an offset runs once, at that instant", async () => {
    const id = jobId("once");
    const job = await create(write(id, { schedule: "2099-02-18T10:30:00+01:00" }));
    expect(job.schedule).toBe("2099-02-18T10:30:00+01:00");
    expect(job.next_run_at).toBe("2099-02-18T09:30:00.000Z");
  });

  it("S3 §4: a disabled job has no next run", async () => {
    const id = jobId("off");
    const job = await create(write(id, { enabled: false }));
    expect(job).toMatchObject({ enabled: false, next_run_at: null, last_fired_at: null });
  });

  it("S3 §4: GET /api/admin/jobs lists jobs in job_id order; ?agent_id filters by agent", async () => {
    const ops = appFor(runConfig(uniqueHost("ok"), { agentId: "ops" }));
    const a = await create(write(`a-${jobId("list")}`));
    const b = await create(write(`b-${jobId("list")}`, { agent_id: "ops" }), ops);
    const all = await admin("GET", "/api/admin/jobs");
    expect(all.status).toBe(200);
    expect(all.body).toStrictEqual({ jobs: [a, b], next_cursor: null });
    expect((await admin("GET", "/api/admin/jobs?agent_id=main")).body).toStrictEqual({ jobs: [a], next_cursor: null });
    expect((await admin("GET", "/api/admin/jobs?agent_id=ops")).body).toStrictEqual({ jobs: [b], next_cursor: null });
    expect((await admin("GET", "/api/admin/jobs?agent_id=nobody")).body).toStrictEqual({ jobs: [], next_cursor: null });
  });

  it("S3 §4 + Lists: the list pages with limit and cursor → next_cursor (3 jobs, limit 2)", async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const jobs = [];
    for (const n of [1, 2, 3]) jobs.push(await create(write(`page-${suffix}-${n}`)));
    const first = await admin("GET", "/api/admin/jobs?limit=2");
    expect(first.status).toBe(200);
    expect(first.body).toStrictEqual({ jobs: [jobs[0], jobs[1]], next_cursor: encodeCursor("jobs", [`page-${suffix}-2`]) });
    const second = await admin("GET", `/api/admin/jobs?limit=2&cursor=${first.body.next_cursor}`);
    expect(second.body).toStrictEqual({ jobs: [jobs[2]], next_cursor: null });
  });

  it("S3 §4: GET of an unknown job is 404 resource.not_found", async () => {
    const id = jobId("nope");
    expectError(await admin("GET", jobPath(id)), 404, "resource.not_found", `no job ${id}`);
  });

  it("S3 §4: POST with an existing job_id is 409 conflict, and the stored job is unchanged", async () => {
    const id = jobId("dup");
    const job = await create(write(id));
    const res = await admin("POST", "/api/admin/jobs", write(id, { message: "something else" }));
    expectError(res, 409, "conflict", `job ${id} already exists; PUT /api/admin/jobs/${id} replaces it`);
    expect((await admin("GET", jobPath(id))).body).toStrictEqual(job);
  });
});

describe("S3 §4 validation on create (each refusal is 400 invalid.request with an exact message)", () => {
  const refused = async (body: Record<string, unknown>, message: string) => {
    const res = await admin("POST", "/api/admin/jobs", body);
    expectError(res, 400, "invalid.request", message);
    const rows = await env.DB.prepare("SELECT COUNT(*) AS n FROM jobs WHERE job_id = ?1").bind(body.job_id).first<{ n: number }>();
    expect(rows?.n).toBe(0);
  };

  it("S3 §4: cron expressions are rejected on create (five fields)", async () => {
    await refused(
      write(jobId("cron"), { schedule: "*/5 * * * *" }),
      `schedule: cron expressions are not supported (got "*/5 * * * *"); ${ACCEPTED_FORMS}`,
    );
  });

  it("S3 §4: cron expressions are rejected on create (a macro: @daily)", async () => {
    await refused(
      write(jobId("cron"), { schedule: "@daily" }),
      `schedule: cron expressions are not supported (got "@daily"); ${ACCEPTED_FORMS}`,
    );
  });

  it("S3 §4: an @every interval below the scheduler's 1m tick is rejected (@every 30s)", async () => {
    await refused(
      write(jobId("short"), { schedule: "@every 30s" }),
      "schedule: @every interval 30s is below the minimum of 1m: the scheduler ticks once a minute",
    );
  });

  it("S3 §4: an @every interval must be positive (@every 0)", async () => {
    await refused(write(jobId("zero"), { schedule: "@every 0" }), "schedule: @every interval must be positive, got 0s");
  });

  it("S3 §4: @every takes a Go duration, which has no day unit (@every 1d)", async () => {
    await refused(
      write(jobId("day"), { schedule: "@every 1d" }),
      'schedule: invalid @every interval: time: unknown unit "d" in duration "1d"',
    );
  });

  it("S3 §4: a one-shot RFC3339 time needs an explicit offset", async () => {
    await refused(
      write(jobId("nooffset"), { schedule: "2099-02-18T09:00:00" }),
      'schedule: invalid RFC 3339 time "2099-02-18T09:00:00": a UTC offset is required (Z or ±HH:MM), e.g. "2026-02-18T09:00:00Z"',
    );
  });

  it("S3 §4: an enabled one-shot in the past is rejected", async () => {
    await refused(
      write(jobId("past"), { schedule: "2020-01-01T00:00:00Z" }),
      "schedule: schedule 2020-01-01T00:00:00Z is in the past (2020-01-01T00:00:00.000Z); an enabled one-shot needs a future time",
    );
  });

  it("S3 §4: a disabled one-shot in the past is accepted and has no next run", async () => {
    const job = await create(write(jobId("pastoff"), { schedule: "2020-01-01T00:00:00Z", enabled: false }));
    expect(job).toMatchObject({ schedule: "2020-01-01T00:00:00Z", enabled: false, next_run_at: null });
  });

  it("S3 §4: fields outside the job schema are rejected (owner)", async () => {
    await refused(write(jobId("extra"), { owner: "alice" }), "unknown field owner");
  });

  it("S3 §4: mode is required (a body without mode is refused, naming the field)", async () => {
    const body: Record<string, unknown> = write(jobId("nomode"));
    delete body.mode;
    // Zod reports a missing enum as an invalid option; the error funnel still words it as missing.
    await refused(body, "mode is required");
  });

  it("S3 §4: enabled is required", async () => {
    const body: Record<string, unknown> = write(jobId("noenabled"));
    delete body.enabled;
    await refused(body, "enabled is required");
  });

  it("S3 §4: mode must be isolated or main_like", async () => {
    await refused(write(jobId("mode"), { mode: "sometimes" }), 'mode: Invalid option: expected one of "isolated"|"main_like"');
  });

  it("S3 §4: agent_id must name a configured agent", async () => {
    await refused(write(jobId("ghost"), { agent_id: "ghost" }), 'agent_id: unknown agent "ghost"');
  });

  it("S3 §4: timezone must be an IANA time-zone name", async () => {
    await refused(
      write(jobId("tz"), { timezone: "Mars/Olympus" }),
      'timezone: unknown time zone "Mars/Olympus"; use an IANA name such as "UTC" or "Europe/Berlin"',
    );
  });

  it("S3 §4: a webhook notify target must be https", async () => {
    await refused(
      write(jobId("http"), { notify: { channel: "webhook", target: "http://example.com/hook" } }),
      "notify.target: must be an https URL",
    );
  });

  it("S3 §4: a webhook notify target may not be a private address", async () => {
    await refused(
      write(jobId("ssrf"), { notify: { channel: "webhook", target: "https://127.0.0.1/x" } }),
      "notify.target: not an allowed webhook URL (private_address)",
    );
  });

  it("S3 §4: notify channel none takes no target", async () => {
    await refused(
      write(jobId("nonex"), { notify: { channel: "none", target: "x" } }),
      "notify.target: must be empty when notify.channel is none",
    );
  });

  it("S3 §4: notify channel must be one the gateway delivers (none, webhook, and since issue 24 §1 telegram, slack, discord)", async () => {
    await refused(
      write(jobId("mail"), { notify: { channel: "email", target: "ops@example.com" } }),
      "notify.channel: must be one of: none, webhook, telegram, slack, discord",
    );
  });

  it("S3 §4: a body that is not JSON is rejected by its content type", async () => {
    const id = jobId("ctype");
    const res = await raw("/api/admin/jobs", {
      method: "POST",
      headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "text/plain" },
      body: JSON.stringify(write(id)),
    });
    expectError(res, 400, "invalid.request", "Content-Type must be application/json");
    expect((await admin("GET", jobPath(id))).status).toBe(404);
  });

  it("S3 §4: webhook notifications are refused when the gateway has no SCHEDULER_WEBHOOK_SECRET", async () => {
    const id = jobId("nosecret");
    const body = write(id, { notify: { channel: "webhook", target: "https://ok.hook.test/x" } });
    const res = await callWithEnv({ ...env, SCHEDULER_WEBHOOK_SECRET: undefined }, "POST", "/api/admin/jobs", body);
    expectError(
      res,
      400,
      "invalid.request",
      "notify.channel: webhook notifications need the SCHEDULER_WEBHOOK_SECRET secret (whsec_…), which is not set on this gateway",
    );
    expect((await admin("GET", jobPath(id))).status).toBe(404);
    // The same body with the secret set is accepted.
    expect((await admin("POST", "/api/admin/jobs", body)).status).toBe(201);
  });
});

describe("S3 §4 PUT replaces a job", () => {
  it("S3 §4: the read-only fields (created_at, updated_at, next_run_at, last_fired_at) are accepted in a PUT body and ignored", async () => {
    const id = jobId("roundtrip");
    await create(write(id));
    const got = (await admin("GET", jobPath(id))).body;
    const edited = {
      ...got,
      message: "Generate the weekly report",
      created_at: "2000-01-01T00:00:00.000Z",
      updated_at: "2000-01-01T00:00:00.000Z",
      next_run_at: "2000-01-01T01:00:00.000Z",
      last_fired_at: "2000-01-01T00:00:00.000Z",
    };
    const res = await admin("PUT", jobPath(id), edited);
    expect(res.status).toBe(200);
    expect(res.body.updated_at).toMatch(ISO_MS);
    expect(Date.parse(res.body.updated_at)).toBeGreaterThanOrEqual(Date.parse(got.created_at));
    expect(res.body).toStrictEqual({ ...got, message: "Generate the weekly report", updated_at: res.body.updated_at });
    expect((await admin("GET", jobPath(id))).body).toStrictEqual(res.body);
  });

  it("S3 §4: PUT replaces the fields: omitted optional fields return to their defaults, the zone is canonicalised", async () => {
    const id = jobId("replace");
    const job = await create(
      write(id, { notify: { channel: "webhook", target: "https://ok.hook.test/x" }, timezone: "Europe/Berlin", mode: "main_like" }),
    );
    const res = await admin("PUT", jobPath(id), write(id, { message: "new text", mode: "isolated", timezone: "europe/berlin" }));
    expect(res.status).toBe(200);
    expect(res.body).toStrictEqual({
      ...job,
      message: "new text",
      mode: "isolated",
      notify: { channel: "none", target: "" },
      timezone: "Europe/Berlin",
      updated_at: res.body.updated_at,
    });
    const res2 = await admin("PUT", jobPath(id), write(id, { message: "new text" }));
    expect(res2.body.timezone).toBe("UTC");
  });

  it("S3 §4: a PUT whose body job_id differs from the path is 400", async () => {
    const id = jobId("mismatch");
    const job = await create(write(id));
    const other = jobId("other");
    expectError(await admin("PUT", jobPath(id), write(other)), 400, "invalid.request", `job_id: the body says ${other}, the path ${id}`);
    expect((await admin("GET", jobPath(id))).body).toStrictEqual(job);
    expect((await admin("GET", jobPath(other))).status).toBe(404);
  });

  it("S3 §4: PUT of an unknown job is 404 (PUT does not create)", async () => {
    const id = jobId("ghostput");
    expectError(await admin("PUT", jobPath(id), write(id)), 404, "resource.not_found", `no job ${id}`);
    expect((await admin("GET", jobPath(id))).status).toBe(404);
  });

  it("S3 §4: cron expressions are rejected on update", async () => {
    const id = jobId("cronput");
    const job = await create(write(id));
    expectError(
      await admin("PUT", jobPath(id), write(id, { schedule: "0 9 * * MON-FRI" })),
      400,
      "invalid.request",
      `schedule: cron expressions are not supported (got "0 9 * * MON-FRI"); ${ACCEPTED_FORMS}`,
    );
    expectError(
      await admin("PUT", jobPath(id), write(id, { schedule: "@hourly" })),
      400,
      "invalid.request",
      `schedule: cron expressions are not supported (got "@hourly"); ${ACCEPTED_FORMS}`,
    );
    expect((await admin("GET", jobPath(id))).body).toStrictEqual(job);
  });

  it("S3 §4: a new schedule is anchored at the update (next_run_at = updated_at + the new interval)", async () => {
    const id = jobId("reanchor");
    await create(write(id));
    const res = await admin("PUT", jobPath(id), write(id, { schedule: "@every 45m" }));
    expect(res.status).toBe(200);
    expect(res.body.schedule).toBe("@every 45m");
    expect(res.body.next_run_at).toBe(plus(res.body.updated_at, 45 * MINUTE));
  });

  it("S3 §4: changing an @every job to a one-shot runs it at the one-shot time", async () => {
    const id = jobId("toonce");
    await create(write(id));
    const res = await admin("PUT", jobPath(id), write(id, { schedule: "2099-06-01T12:00:00Z" }));
    expect(res.body.next_run_at).toBe("2099-06-01T12:00:00.000Z");
  });

  it("S3 §4: keeping the schedule and enabled keeps next_run_at", async () => {
    const id = jobId("keep");
    const job = await create(write(id));
    // A stored next run that is not created_at + interval shows that PUT keeps it rather than recomputing it.
    const stored = Date.parse(job.created_at) + 7 * MINUTE;
    await env.DB.prepare("UPDATE jobs SET next_run_ms = ?2 WHERE job_id = ?1").bind(id, stored).run();
    const res = await admin("PUT", jobPath(id), write(id, { message: "reworded" }));
    expect(res.status).toBe(200);
    expect(res.body.next_run_at).toBe(new Date(stored).toISOString());
  });

  it("S3 §4: disabling a job clears next_run_at", async () => {
    const id = jobId("disable");
    await create(write(id));
    const res = await admin("PUT", jobPath(id), write(id, { enabled: false }));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ enabled: false, next_run_at: null });
  });

  it("S3 §4 missed windows are not replayed: re-enabling an @every job runs at the next slot after now, counted from its anchor", async () => {
    const id = jobId("reenable");
    await create(write(id));
    expect((await admin("PUT", jobPath(id), write(id, { enabled: false }))).body.next_run_at).toBeNull();
    // The job was set up 10.5 hours ago: ten slots have passed while it was off.
    const anchor = Date.now() - 10 * HOUR - 30 * MINUTE;
    await env.DB.prepare("UPDATE jobs SET anchor_ms = ?2, next_run_ms = ?3, created_at = ?4 WHERE job_id = ?1")
      .bind(id, anchor, anchor + HOUR, new Date(anchor).toISOString())
      .run();
    const res = await admin("PUT", jobPath(id), write(id, { enabled: true }));
    expect(res.status).toBe(200);
    expect(res.body.created_at).toBe(new Date(anchor).toISOString());
    expect(res.body.next_run_at).toBe(new Date(anchor + 11 * HOUR).toISOString());
    expect(Date.parse(res.body.next_run_at)).toBeGreaterThan(Date.parse(res.body.updated_at));
  });

  it("S3 §4: re-enabling a one-shot that already fired is refused; a new schedule runs it again", async () => {
    const id = jobId("fired");
    const at = "2025-06-01T09:00:00Z";
    await create(write(id, { schedule: at, enabled: false }));
    // The row as the tick leaves a fired one-shot: disabled, no next run, last_fired_at = its slot.
    await env.DB.prepare("UPDATE jobs SET enabled = 0, last_fired_at = ?2, next_run_ms = NULL WHERE job_id = ?1")
      .bind(id, "2025-06-01T09:00:00.000Z")
      .run();
    const fired = (await admin("GET", jobPath(id))).body;
    expect(fired).toMatchObject({ schedule: at, enabled: false, next_run_at: null, last_fired_at: "2025-06-01T09:00:00.000Z" });
    expectError(
      await admin("PUT", jobPath(id), write(id, { schedule: at })),
      400,
      "invalid.request",
      `schedule: one-shot job ${id} has already fired; give it a new schedule to run it again`,
    );
    expect((await admin("GET", jobPath(id))).body).toStrictEqual(fired);
    const again = await admin("PUT", jobPath(id), write(id, { schedule: "2099-02-01T09:00:00Z" }));
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ enabled: true, next_run_at: "2099-02-01T09:00:00.000Z", last_fired_at: "2025-06-01T09:00:00.000Z" });
  });

  it("S3 §4: re-enabling a one-shot whose time passed while it was disabled (never fired) is refused as past", async () => {
    const id = jobId("lapsed");
    await create(write(id, { schedule: "2025-06-01T09:00:00Z", enabled: false }));
    expectError(
      await admin("PUT", jobPath(id), write(id, { schedule: "2025-06-01T09:00:00Z" })),
      400,
      "invalid.request",
      "schedule: schedule 2025-06-01T09:00:00Z is in the past (2025-06-01T09:00:00.000Z); an enabled one-shot needs a future time",
    );
  });

  it("S3 §4: PUT validates like create (an enabled one-shot moved into the past is refused)", async () => {
    const id = jobId("putpast");
    await create(write(id));
    expectError(
      await admin("PUT", jobPath(id), write(id, { schedule: "2020-01-01T00:00:00Z" })),
      400,
      "invalid.request",
      "schedule: schedule 2020-01-01T00:00:00Z is in the past (2020-01-01T00:00:00.000Z); an enabled one-shot needs a future time",
    );
  });
});

describe("S3 §4 DELETE and firings", () => {
  it("S3 §4: DELETE answers 200 with the deleted job, removes its firings, and a second DELETE is 404", async () => {
    const id = jobId("del");
    const job = await create(write(id));
    await insertFiring(id, "2026-01-01T00:00:00.000Z");
    const res = await admin("DELETE", jobPath(id));
    expect(res.status).toBe(200);
    expect(res.body).toStrictEqual({ deleted: job });
    expectError(await admin("GET", jobPath(id)), 404, "resource.not_found", `no job ${id}`);
    expectError(await admin("DELETE", jobPath(id)), 404, "resource.not_found", `no job ${id}`);
    const left = await env.DB.prepare("SELECT COUNT(*) AS n FROM job_firings WHERE job_id = ?1").bind(id).first<{ n: number }>();
    expect(left?.n).toBe(0);
    expect((await admin("GET", `${jobPath(id)}/firings`)).body).toStrictEqual({ firings: [], next_cursor: null });
  });

  it("S3 §4: GET /firings lists a job's firings newest first, with run ids and the nested notify outcome", async () => {
    const id = jobId("firings");
    await create(write(id));
    await insertFiring(id, "2026-03-01T10:00:00.000Z", {
      run_id: "run_older",
      session_key: "agent:main:job:x",
      dispatched_at: "2026-03-01T10:00:01.000Z",
    });
    await insertFiring(id, "2026-03-01T12:00:00.000Z", {
      status: "dispatched",
      missed: 1,
      claimed_at: "2026-03-01T12:00:02.000Z",
      attempts: 2,
      run_id: "run_newer",
      session_key: "agent:main:job:y",
      dispatched_at: "2026-03-01T12:00:03.000Z",
      notify_channel: "webhook",
      notify_target: "https://ok.hook.test/x",
      notify_status: "delivered",
      notify_attempts: 1,
      notified_at: "2026-03-01T12:05:00.000Z",
    });
    await insertFiring(id, "2026-03-01T11:00:00.000Z", { status: "skipped", error: "agent busy", notify_status: "none" });
    await insertFiring(jobId("someone-else"), "2026-03-01T13:00:00.000Z");
    const res = await admin("GET", `${jobPath(id)}/firings`);
    expect(res.status).toBe(200);
    expect(res.body).toStrictEqual({
      firings: [
        {
          job_id: id,
          scheduled_for: "2026-03-01T12:00:00.000Z",
          agent_id: "main",
          status: "dispatched",
          missed: 1,
          claimed_at: "2026-03-01T12:00:02.000Z",
          attempts: 2,
          run_id: "run_newer",
          session_key: "agent:main:job:y",
          dispatched_at: "2026-03-01T12:00:03.000Z",
          error: null,
          notify: { channel: "webhook", status: "delivered", attempts: 1, error: null, notified_at: "2026-03-01T12:05:00.000Z" },
        },
        {
          job_id: id,
          scheduled_for: "2026-03-01T11:00:00.000Z",
          agent_id: "main",
          status: "skipped",
          missed: 0,
          claimed_at: "2026-03-01T11:00:00.000Z",
          attempts: 1,
          run_id: null,
          session_key: null,
          dispatched_at: null,
          error: "agent busy",
          notify: { channel: "none", status: "none", attempts: 0, error: null, notified_at: null },
        },
        {
          job_id: id,
          scheduled_for: "2026-03-01T10:00:00.000Z",
          agent_id: "main",
          status: "dispatched",
          missed: 0,
          claimed_at: "2026-03-01T10:00:00.000Z",
          attempts: 1,
          run_id: "run_older",
          session_key: "agent:main:job:x",
          dispatched_at: "2026-03-01T10:00:01.000Z",
          error: null,
          notify: { channel: "none", status: "none", attempts: 0, error: null, notified_at: null },
        },
      ],
      next_cursor: null,
    });
    const limited = await admin("GET", `${jobPath(id)}/firings?limit=1`);
    expect(limited.body.firings.map((f: any) => f.scheduled_for)).toEqual(["2026-03-01T12:00:00.000Z"]);
    expect(limited.body.next_cursor).toBe(encodeCursor(`firings:${id}`, ["2026-03-01T12:00:00.000Z"]));
  });
});

describe("admin scope on the job routes", () => {
  it("S3 §4 admin routes: no token is 401 auth.unauthorized", async () => {
    const res = await raw("/api/admin/jobs", { method: "GET" });
    expectError(res, 401, "auth.unauthorized", "missing bearer token: send Authorization: Bearer <token>");
    expect(res.headers.get("WWW-Authenticate")).toBe('Bearer realm="sophie-gateway"');
  });

  it("S3 §4 admin routes: an api token is 403 auth.forbidden, and creates nothing", async () => {
    const id = jobId("alice");
    expectError(
      await call(app, "GET", "/api/admin/jobs", undefined, ALICE),
      403,
      "auth.forbidden",
      'this route needs a token with the "admin" scope',
    );
    expectError(
      await call(app, "POST", "/api/admin/jobs", write(id), ALICE),
      403,
      "auth.forbidden",
      'this route needs a token with the "admin" scope',
    );
    expect((await admin("GET", jobPath(id))).status).toBe(404);
  });
});

describe("S3 §3 audit of job changes", () => {
  it("S3 §4 job changes are audited: job.created, job.updated, job.deleted with actor admin in the agent's main session stream", async () => {
    const id = jobId("audit");
    const created = await create(write(id));
    const updated = (await admin("PUT", jobPath(id), write(id, { message: "audited edit" }))).body;
    const deleted = (await admin("DELETE", jobPath(id))).body.deleted;
    expect(deleted).toStrictEqual(updated);

    const mine = async () => {
      const res = await admin("GET", `/api/admin/audit?agent_id=main&date=${today()}`);
      expect(res.status).toBe(200);
      return res.text
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l))
        .filter((e) => e.payload?.job?.job_id === id);
    };
    await until(async () => (await mine()).length === 3);
    const events = await mine();
    expect(events.map((e) => e.event_type)).toEqual(["job.created", "job.updated", "job.deleted"]);
    for (const e of events) expect(e).toMatchObject({ actor: "admin", agent_id: "main", run_id: null, redactions: [] });
    expect(events.map((e) => e.payload)).toStrictEqual([{ job: created }, { job: updated }, { job: deleted }]);
    expect(events[1].seq).toBe(events[0].seq + 1);
    expect(events[2].seq).toBe(events[1].seq + 1);
    expect(await auditBacklog(env.SESSIONS.getByName("agent:main:main"))).toBe(0);
  });
});

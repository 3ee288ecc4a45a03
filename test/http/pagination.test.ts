/**
 * Lists (issue 11 item 1; docs/api.md "Lists"; src/http/admin/paging.ts): every admin list pages the same way —
 * `?limit=` (1–200, default 50; jobs up to 500), `?cursor=` from the previous page's `next_cursor`, `null` on the
 * last page — over a stable, unique sort key, and keeps its filters. Against the real local D1, SessionDOs and R2,
 * through the app. Rows are seeded with the index writers the gateway uses (or, for the tables whose writers stamp
 * the clock, with rows of the same shape) at chosen timestamps, so ties on the first sort key cross page boundaries.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../../src/config/parse";
import { encodeCursor, INVALID_CURSOR } from "../../src/http/admin/paging";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { indexApproval } from "../../src/runs/approvals";
import { indexRun } from "../../src/runs/index-d1";
import { runConfig, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, call } from "../support/runs";

const app = appFor(runConfig(uniqueHost("ok")));
const suffix = () => crypto.randomUUID().slice(0, 8);
const at = (second: number) => `2030-01-01T00:00:${String(second).padStart(2, "0")}.000Z`;

const get = (path: string, on: App = app) => call(on, "GET", path, undefined, ADMIN);

const INVALID_CURSOR_ENVELOPE = { error: { code: "invalid.request", message: INVALID_CURSOR } };

/** Walks a list `limit` rows at a time from the first page (or from `start`) to the one whose next_cursor is null. */
async function walk(
  path: string,
  key: string,
  o: { limit?: number; on?: App; start?: string } = {},
): Promise<{ pages: any[][]; cursors: (string | null)[] }> {
  const { limit = 2, on = app } = o;
  const pages: any[][] = [];
  const cursors: (string | null)[] = [];
  let cursor: string | null = o.start ?? null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const res = await get(`${path}${sep}limit=${limit}${cursor === null ? "" : `&cursor=${cursor}`}`, on);
    expect(res.status, res.text).toBe(200);
    expect(Object.keys(res.body)).toContain("next_cursor");
    pages.push(res.body[key]);
    cursor = res.body.next_cursor;
    cursors.push(cursor);
    if (pages.length > 20) throw new Error(`${path}: no last page after 20 pages`);
  } while (cursor !== null);
  return { pages, cursors };
}

/** A bad cursor of each kind is refused with the same envelope: not base64url, not JSON, not a key, another list's. */
async function expectCursorsRefused(path: string, foreign: string, on: App = app): Promise<void> {
  const sep = path.includes("?") ? "&" : "?";
  const b64 = (text: string) => btoa(text).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
  for (const cursor of ["!!!", b64("not json"), b64('{"a":1}'), b64("[]"), encodeCursor("nope", ["x"]), foreign, `${foreign}A`]) {
    const res = await get(`${path}${sep}cursor=${encodeURIComponent(cursor)}`, on);
    expect({ cursor, status: res.status, body: res.body }).toStrictEqual({ cursor, status: 400, body: INVALID_CURSOR_ENVELOPE });
  }
}

/** limit below 1 or above the list's maximum is 400 naming the field; the maximum itself is accepted. */
async function expectLimitBounds(path: string, max: number, on: App = app): Promise<void> {
  const sep = path.includes("?") ? "&" : "?";
  expect(await get(`${path}${sep}limit=0`, on)).toMatchObject({
    status: 400,
    body: { error: { code: "invalid.request", message: "limit: Too small: expected number to be >=1" } },
  });
  expect(await get(`${path}${sep}limit=${max + 1}`, on)).toMatchObject({
    status: 400,
    body: { error: { code: "invalid.request", message: `limit: Too big: expected number to be <=${max}` } },
  });
  expect((await get(`${path}${sep}limit=${max}`, on)).status).toBe(200);
}

// ---- seeds ------------------------------------------------------------------------------

async function seedRun(runId: string, createdAt: string, o: { agent: string; status?: string; caller?: string | null }) {
  await indexRun(env.DB, {
    run_id: runId,
    agent_id: o.agent,
    session_key: `agent:${o.agent}:http:alice:run:${runId}`,
    session_id: `sess_${runId}`,
    caller_id: o.caller === undefined ? "alice" : o.caller,
    source: "http",
    status: o.status ?? "completed",
    created_at: createdAt,
    updated_at: createdAt,
  });
}

async function seedApproval(id: string, createdAt: string, o: { agent: string; status?: "pending" | "approved" | "denied" | "expired" }) {
  await indexApproval(env.DB, {
    approval_id: id,
    agent_id: o.agent,
    run_id: `run_${id}`,
    session_key: `agent:${o.agent}:main`,
    tool: "test.send",
    status: o.status ?? "pending",
    created_at: createdAt,
    expires_at: "2030-01-02T00:00:00.000Z",
    decided_at: null,
  });
}

/** A session index row as upsertSessionIndex writes it, at a chosen created_at (the writer stamps the clock). */
async function seedSession(o: { agent: string; channel: string; room: string; user: string; createdAt: string }): Promise<string> {
  const key = `agent:${o.agent}:${o.channel}:${o.room}:dm:${o.user}`;
  await env.DB.prepare(
    `INSERT INTO sessions (session_key, agent_id, channel, account_id, scope, peer_id, session_id, created_at, updated_at)
     VALUES (?1, ?2, ?3, ?4, 'dm', ?5, ?6, ?7, ?7)`,
  )
    .bind(key, o.agent, o.channel, o.room, o.user, `sid_${crypto.randomUUID().replaceAll("-", "")}`, o.createdAt)
    .run();
  return key;
}

/** A firing row as the scheduler tick writes it. */
async function seedFiring(jobId: string, scheduledFor: string): Promise<void> {
  await env.DB.prepare(
    `INSERT INTO job_firings (job_id, scheduled_for, agent_id, tick, status, message, mode, notify_target, missed, claimed_at, attempts,
                              notify_channel, notify_status, notify_attempts)
     VALUES (?1, ?2, 'main', 'tick_test', 'dispatched', 'm', 'isolated', '', 0, ?2, 1, 'none', 'none', 0)`,
  )
    .bind(jobId, scheduledFor)
    .run();
}

/** An app whose agent `agent` exists (jobs can only be created for configured agents). */
const appWithAgent = (agent: string) => appFor(runConfig(uniqueHost("ok"), { agentId: agent }));

async function createJob(on: App, jobId: string, agent: string): Promise<void> {
  const res = await call(
    on,
    "POST",
    "/api/admin/jobs",
    { job_id: jobId, agent_id: agent, schedule: "@every 1h", message: "m", mode: "isolated", enabled: true },
    ADMIN,
  );
  expect(res.status, res.text).toBe(201);
}

/**
 * An app whose model window is too small for any prompt: every chat run fails over_budget before any network call
 * and adds nothing to the transcript, so a session holds exactly the messages sent. maxTurns 3 archives older turns to R2.
 */
function chatApp(): App {
  const parsed = parseGatewayConfig({
    models: {
      default: "moonshot:kimi-k1-128k",
      providers: {
        moonshot: {
          baseUrl: "https://api.moonshot.cn/v1",
          models: { "kimi-k1-128k": { contextWindow: 1100, maxOutputTokens: 1000, supportsTools: true, supportsStreaming: true } },
        },
      },
    },
    agents: { main: { session: { maxTurns: 3 } } },
  });
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues));
  return createApp({ config: parsed.value, logger: createLogger("error") });
}

async function chat(on: App, room: string, message: string): Promise<{ session_id: string }> {
  const res = await call(on, "POST", "/v1/chat/messages", { user_id: "pager", room_id: room, agent_id: "main", message }, ALICE);
  expect(res.status, res.text).toBe(message.startsWith("/") ? 200 : 202);
  return res.body;
}

// ---- the lists ----------------------------------------------------------------------------

describe("Lists: GET /api/admin/runs (newest first: created_at, run_id descending)", () => {
  it("pages of 2 over 5 runs return each run once, newest first, ties on created_at broken by run_id, next_cursor null at the end", async () => {
    const agent = `pg-runs-${suffix()}`;
    // r2, r3 and r4 share a created_at, and the page boundary falls inside the tie.
    for (const [id, second] of [
      ["r1", 1],
      ["r2", 2],
      ["r3", 2],
      ["r4", 2],
      ["r5", 4],
    ] as const)
      await seedRun(`${agent}-${id}`, at(second), { agent });
    const { pages, cursors } = await walk(`/api/admin/runs?agent_id=${agent}`, "runs");
    expect(pages.map((p) => p.map((r: any) => r.run_id))).toEqual([
      [`${agent}-r5`, `${agent}-r4`],
      [`${agent}-r3`, `${agent}-r2`],
      [`${agent}-r1`],
    ]);
    expect(cursors).toEqual([encodeCursor("runs", [at(2), `${agent}-r4`]), encodeCursor("runs", [at(2), `${agent}-r2`]), null]);
    expect(pages[0]?.[0]).toStrictEqual({
      run_id: `${agent}-r5`,
      agent_id: agent,
      session_key: `agent:${agent}:http:alice:run:${agent}-r5`,
      session_id: `sess_${agent}-r5`,
      caller_id: "alice",
      source: "http",
      status: "completed",
      created_at: at(4),
      updated_at: at(4),
      // Issue 25 §3 (D-079): a row written without them (as before migration 0021) lists its previews and counts as null.
      message_preview: null,
      output_preview: null,
      duration_ms: null,
      rounds: null,
      tool_calls: null,
      // D-082: a row written without usage (as before migration 0020) made no model call: no tokens, no cost.
      tokens: { prompt: 0, completion: 0, cached: 0, total: 0 },
      cost: null,
    });
  });

  it("a run queued between page 1 and page 2 neither repeats nor skips a run; an older one inserted later is served once", async () => {
    const agent = `pg-runs-${suffix()}`;
    for (const n of [1, 2, 3, 4, 5]) await seedRun(`${agent}-r${n}`, at(10 + n), { agent });
    const first = await get(`/api/admin/runs?agent_id=${agent}&limit=2`);
    await seedRun(`${agent}-newest`, at(30), { agent });
    await seedRun(`${agent}-oldest`, at(5), { agent });
    const rest = await walk(`/api/admin/runs?agent_id=${agent}`, "runs", { start: first.body.next_cursor });
    expect([...first.body.runs, ...rest.pages.flat()].map((r: any) => r.run_id)).toEqual(
      ["r5", "r4", "r3", "r2", "r1", "oldest"].map((n) => `${agent}-${n}`),
    );
  });

  it("filters narrow exactly: agent_id, status, caller_id, and together", async () => {
    const [a, b, alice, bob] = [`pg-runs-a-${suffix()}`, `pg-runs-b-${suffix()}`, `caller-a-${suffix()}`, `caller-b-${suffix()}`];
    await seedRun(`${a}-1`, at(1), { agent: a, status: "completed", caller: alice });
    await seedRun(`${a}-2`, at(2), { agent: a, status: "failed", caller: bob });
    await seedRun(`${a}-3`, at(3), { agent: a, status: "failed", caller: alice });
    await seedRun(`${b}-1`, at(4), { agent: b, status: "failed", caller: alice });
    const ids = async (query: string) => (await get(`/api/admin/runs?${query}`)).body.runs.map((r: any) => r.run_id);
    expect(await ids(`agent_id=${a}`)).toEqual([`${a}-3`, `${a}-2`, `${a}-1`]);
    expect(await ids(`agent_id=${a}&status=failed`)).toEqual([`${a}-3`, `${a}-2`]);
    expect(await ids(`caller_id=${alice}`)).toEqual([`${b}-1`, `${a}-3`, `${a}-1`]);
    expect(await ids(`caller_id=${alice}&status=failed&agent_id=${a}`)).toEqual([`${a}-3`]);
    expect((await get(`/api/admin/runs?agent_id=${a}&status=bogus`)).status).toBe(400);
  });

  it("a malformed or foreign cursor is 400 invalid.request; limit is 1–200 (default 50)", async () => {
    await expectCursorsRefused("/api/admin/runs", encodeCursor("approvals", [at(1), "apr_x"]));
    await expectLimitBounds("/api/admin/runs", 200);
    const agent = `pg-runs-${suffix()}`;
    for (let n = 10; n < 61; n++) await seedRun(`${agent}-${n}`, at(n % 60), { agent });
    const page = await get(`/api/admin/runs?agent_id=${agent}`);
    expect(page.body.runs).toHaveLength(50);
    expect(page.body.next_cursor).not.toBeNull();
  });
});

describe("Lists: GET /api/admin/approvals (newest first: created_at, approval_id descending)", () => {
  it("pages of 2 over 5 approvals return each once, newest first, next_cursor null at the end", async () => {
    const agent = `pg-apr-${suffix()}`;
    for (const [id, second] of [
      ["a1", 1],
      ["a2", 3],
      ["a3", 3],
      ["a4", 3],
      ["a5", 5],
    ] as const) {
      await seedApproval(`apr_${agent}_${id}`, at(second), { agent });
    }
    const { pages, cursors } = await walk(`/api/admin/approvals?agent_id=${agent}`, "approvals");
    expect(pages.map((p) => p.map((a: any) => a.approval_id))).toEqual([
      [`apr_${agent}_a5`, `apr_${agent}_a4`],
      [`apr_${agent}_a3`, `apr_${agent}_a2`],
      [`apr_${agent}_a1`],
    ]);
    expect(cursors).toEqual([
      encodeCursor("approvals", [at(3), `apr_${agent}_a4`]),
      encodeCursor("approvals", [at(3), `apr_${agent}_a2`]),
      null,
    ]);
    expect(pages[2]?.[0]).toStrictEqual({
      approval_id: `apr_${agent}_a1`,
      agent_id: agent,
      run_id: `run_apr_${agent}_a1`,
      session_key: `agent:${agent}:main`,
      tool: "test.send",
      status: "pending",
      created_at: at(1),
      expires_at: "2030-01-02T00:00:00.000Z",
      decided_at: null,
      // Issue 24 §2: who decided, and through what (the admin or a chat's button); null while pending.
      decided_by: null,
      decided_via: null,
    });
  });

  it("an approval requested between page 1 and page 2 neither repeats nor skips one", async () => {
    const agent = `pg-apr-${suffix()}`;
    for (const n of [1, 2, 3, 4, 5]) await seedApproval(`apr_${agent}_${n}`, at(10 + n), { agent });
    const first = await get(`/api/admin/approvals?agent_id=${agent}&limit=2`);
    await seedApproval(`apr_${agent}_newest`, at(40), { agent });
    const rest = await walk(`/api/admin/approvals?agent_id=${agent}`, "approvals", { start: first.body.next_cursor });
    expect([...first.body.approvals, ...rest.pages.flat()].map((a: any) => a.approval_id)).toEqual(
      [5, 4, 3, 2, 1].map((n) => `apr_${agent}_${n}`),
    );
  });

  it("filters narrow exactly: status, agent_id, and together", async () => {
    const [a, b] = [`pg-apr-a-${suffix()}`, `pg-apr-b-${suffix()}`];
    await seedApproval(`apr_${a}_1`, at(1), { agent: a, status: "pending" });
    await seedApproval(`apr_${a}_2`, at(2), { agent: a, status: "denied" });
    await seedApproval(`apr_${b}_1`, at(3), { agent: b, status: "denied" });
    const ids = async (query: string) => (await get(`/api/admin/approvals?${query}`)).body.approvals.map((x: any) => x.approval_id);
    expect(await ids(`agent_id=${a}`)).toEqual([`apr_${a}_2`, `apr_${a}_1`]);
    expect(await ids(`agent_id=${a}&status=pending`)).toEqual([`apr_${a}_1`]);
    expect((await ids("status=denied")).filter((id: string) => id.includes(a) || id.includes(b))).toEqual([`apr_${b}_1`, `apr_${a}_2`]);
  });

  it("a malformed or foreign cursor is 400 invalid.request; limit is 1–200", async () => {
    await expectCursorsRefused("/api/admin/approvals", encodeCursor("runs", [at(1), "run_x"]));
    await expectLimitBounds("/api/admin/approvals", 200);
  });
});

describe("Lists: GET /api/admin/chat/sessions (newest first: created_at, session_key descending)", () => {
  it("pages of 2 over 5 sessions return each once, newest first, next_cursor null at the end", async () => {
    const agent = `pg-ses-${suffix()}`;
    const keys: string[] = [];
    for (const [user, second] of [
      ["u1", 1],
      ["u2", 2],
      ["u3", 2],
      ["u4", 2],
      ["u5", 9],
    ] as const) {
      keys.push(await seedSession({ agent, channel: "http", room: "r", user, createdAt: at(second) }));
    }
    const { pages, cursors } = await walk(`/api/admin/chat/sessions?agent_id=${agent}`, "sessions");
    expect(pages.map((p) => p.map((s: any) => s.user_id))).toEqual([["u5", "u4"], ["u3", "u2"], ["u1"]]);
    expect(cursors).toEqual([
      encodeCursor("sessions", [at(2), keys[3] as string]),
      encodeCursor("sessions", [at(2), keys[1] as string]),
      null,
    ]);
    expect(pages[0]?.[0]).toStrictEqual({
      session_key: `agent:${agent}:http:r:dm:u5`,
      agent_id: agent,
      channel: "http",
      room_id: "r",
      user_id: "u5",
      scope: "dm",
      session_id: expect.stringMatching(/^sid_[0-9a-f]{32}$/),
      created_at: at(9),
      updated_at: at(9),
    });
  });

  it("a session created or active between page 1 and page 2 neither repeats nor skips one", async () => {
    const agent = `pg-ses-${suffix()}`;
    for (const n of [1, 2, 3, 4, 5]) await seedSession({ agent, channel: "http", room: "r", user: `u${n}`, createdAt: at(10 + n) });
    const first = await get(`/api/admin/chat/sessions?agent_id=${agent}&limit=2`);
    await seedSession({ agent, channel: "http", room: "r", user: "newest", createdAt: at(50) });
    // Activity moves updated_at, not the session's place in the list.
    await env.DB.prepare("UPDATE sessions SET updated_at = ?1 WHERE session_key = ?2")
      .bind(new Date().toISOString(), `agent:${agent}:http:r:dm:u2`)
      .run();
    const rest = await walk(`/api/admin/chat/sessions?agent_id=${agent}`, "sessions", { start: first.body.next_cursor });
    expect([...first.body.sessions, ...rest.pages.flat()].map((s: any) => s.user_id)).toEqual(["u5", "u4", "u3", "u2", "u1"]);
  });

  it("filters narrow exactly: agent_id, user_id, room_id, channel (S3 §5: agent/user/room/channel), and together", async () => {
    const [a, b, room, user] = [`pg-ses-a-${suffix()}`, `pg-ses-b-${suffix()}`, `room-${suffix()}`, `user-${suffix()}`];
    const s1 = await seedSession({ agent: a, channel: "http", room, user, createdAt: at(1) });
    const s2 = await seedSession({ agent: a, channel: "telegram", room, user: "other", createdAt: at(2) });
    const s3 = await seedSession({ agent: a, channel: "http", room: "elsewhere", user, createdAt: at(3) });
    const s4 = await seedSession({ agent: b, channel: "http", room, user, createdAt: at(4) });
    const keys = async (query: string) => (await get(`/api/admin/chat/sessions?${query}`)).body.sessions.map((s: any) => s.session_key);
    expect(await keys(`agent_id=${a}`)).toEqual([s3, s2, s1]);
    expect(await keys(`user_id=${user}`)).toEqual([s4, s3, s1]);
    expect(await keys(`room_id=${room}`)).toEqual([s4, s2, s1]);
    expect(await keys(`agent_id=${a}&channel=telegram`)).toEqual([s2]);
    expect(await keys(`agent_id=${a}&user_id=${user}&room_id=${room}&channel=http`)).toEqual([s1]);
  });

  it("a malformed or foreign cursor is 400 invalid.request; limit is 1–200", async () => {
    await expectCursorsRefused("/api/admin/chat/sessions", encodeCursor("runs", [at(1), "run_x"]));
    await expectLimitBounds("/api/admin/chat/sessions", 200);
  });
});

describe("Lists: GET /api/admin/chat/sessions/{session_id}/messages (transcript order: seq ascending)", () => {
  const chats = chatApp();
  const texts = (rows: any[]) => rows.map((m) => m.content);

  it("pages of 2 over 5 messages, 2 of them archived to R2 by maxTurns, return each once in order, next_cursor null at the end", async () => {
    const room = `pg-msg-${suffix()}`;
    let sessionId = "";
    for (const n of [1, 2, 3, 4, 5]) sessionId = (await chat(chats, room, `m${n}`)).session_id;
    const listed = await env.AUDIT.list({ prefix: `agents/main/sessions/agent:main:http:alice~${room}:dm:pager/` });
    expect(listed.objects.length).toBeGreaterThanOrEqual(1); // older turns live in R2 now
    const { pages, cursors } = await walk(`/api/admin/chat/sessions/${sessionId}/messages`, "messages", { on: chats });
    expect(pages.map(texts)).toEqual([["m1", "m2"], ["m3", "m4"], ["m5"]]);
    const seqs = pages.flat().map((m) => m.seq);
    expect(seqs).toEqual([...seqs].sort((x, y) => x - y));
    expect(cursors).toEqual([encodeCursor(`messages:${sessionId}`, [seqs[1]]), encodeCursor(`messages:${sessionId}`, [seqs[3]]), null]);
  });

  it("a message sent between page 1 and page 2 neither repeats nor skips one, and is served once at the end", async () => {
    const room = `pg-msg-${suffix()}`;
    let sessionId = "";
    for (const n of [1, 2, 3, 4, 5]) sessionId = (await chat(chats, room, `m${n}`)).session_id;
    const path = `/api/admin/chat/sessions/${sessionId}/messages`;
    const first = await get(`${path}?limit=2`, chats);
    await chat(chats, room, "m6");
    const rest = await walk(path, "messages", { start: first.body.next_cursor, on: chats });
    expect(texts([...first.body.messages, ...rest.pages.flat()])).toEqual(["m1", "m2", "m3", "m4", "m5", "m6"]);
  });

  it("an archived generation (after /new) pages the same way", async () => {
    const room = `pg-msg-${suffix()}`;
    let sessionId = "";
    for (const n of [1, 2, 3]) sessionId = (await chat(chats, room, `old${n}`)).session_id;
    await chat(chats, room, "/new");
    await chat(chats, room, "new generation");
    const { pages } = await walk(`/api/admin/chat/sessions/${sessionId}/messages`, "messages", { on: chats });
    expect(pages.map(texts)).toEqual([["old1", "old2"], ["old3"]]);
  });

  it("a cursor of another session, or malformed, is 400 invalid.request; limit is 1–200; an unknown session stays 404", async () => {
    const a = (await chat(chats, `pg-msg-${suffix()}`, "a")).session_id;
    const b = (await chat(chats, `pg-msg-${suffix()}`, "b")).session_id;
    await expectCursorsRefused(`/api/admin/chat/sessions/${a}/messages`, encodeCursor(`messages:${b}`, [1]), chats);
    await expectLimitBounds(`/api/admin/chat/sessions/${a}/messages`, 200, chats);
    const unknown = `ses_${"0".repeat(32)}`;
    expect(await get(`/api/admin/chat/sessions/${unknown}/messages`, chats)).toMatchObject({
      status: 404,
      body: { error: { code: "resource.not_found", message: `no session ${unknown}` } },
    });
  });
});

describe("Lists: GET /api/admin/jobs (job_id ascending; limit up to 500)", () => {
  it("pages of 2 over 5 jobs return each once in job_id order, next_cursor null at the end", async () => {
    const agent = `pgjobs-${suffix()}`;
    const on = appWithAgent(agent);
    for (const n of [3, 1, 5, 2, 4]) await createJob(on, `${agent}-${n}`, agent);
    const { pages, cursors } = await walk(`/api/admin/jobs?agent_id=${agent}`, "jobs", { on });
    expect(pages.map((p) => p.map((j: any) => j.job_id))).toEqual([
      [`${agent}-1`, `${agent}-2`],
      [`${agent}-3`, `${agent}-4`],
      [`${agent}-5`],
    ]);
    expect(cursors).toEqual([encodeCursor("jobs", [`${agent}-2`]), encodeCursor("jobs", [`${agent}-4`]), null]);
  });

  it("a job created between page 1 and page 2 neither repeats nor skips one; one after the cursor is served once", async () => {
    const agent = `pgjobs-${suffix()}`;
    const on = appWithAgent(agent);
    for (const n of [2, 3, 4, 5, 6]) await createJob(on, `${agent}-${n}`, agent);
    const first = await get(`/api/admin/jobs?agent_id=${agent}&limit=2`, on);
    await createJob(on, `${agent}-1`, agent); // sorts before the cursor: not on later pages
    await createJob(on, `${agent}-7`, agent); // sorts after it: served once
    const rest = await walk(`/api/admin/jobs?agent_id=${agent}`, "jobs", { start: first.body.next_cursor, on });
    expect([...first.body.jobs, ...rest.pages.flat()].map((j: any) => j.job_id)).toEqual([2, 3, 4, 5, 6, 7].map((n) => `${agent}-${n}`));
  });

  it("the agent_id filter narrows exactly", async () => {
    const [a, b] = [`pgjobs-a-${suffix()}`, `pgjobs-b-${suffix()}`];
    await createJob(appWithAgent(a), `${a}-1`, a);
    await createJob(appWithAgent(b), `${b}-1`, b);
    await createJob(appWithAgent(a), `${a}-2`, a);
    expect((await get(`/api/admin/jobs?agent_id=${a}`)).body.jobs.map((j: any) => j.job_id)).toEqual([`${a}-1`, `${a}-2`]);
    expect((await get(`/api/admin/jobs?agent_id=${b}`)).body.jobs.map((j: any) => j.job_id)).toEqual([`${b}-1`]);
  });

  it("a malformed or foreign cursor is 400 invalid.request; limit is 1–500 (the documented exception), default 50", async () => {
    await expectCursorsRefused("/api/admin/jobs", encodeCursor("firings:x", ["2030-01-01T00:00:00.000Z"]));
    await expectLimitBounds("/api/admin/jobs", 500);
    expect((await get("/api/admin/jobs?after=x")).status).toBe(200); // the old parameter is gone: ignored like any unknown one
  });
});

describe("Lists: GET /api/admin/jobs/{job_id}/firings (newest first: scheduled_for descending)", () => {
  it("pages of 2 over 5 firings return each once, newest first, next_cursor null at the end", async () => {
    const job = `pgfire-${suffix()}`;
    for (const n of [3, 1, 5, 2, 4]) await seedFiring(job, at(n));
    const { pages, cursors } = await walk(`/api/admin/jobs/${job}/firings`, "firings");
    expect(pages.map((p) => p.map((f: any) => f.scheduled_for))).toEqual([[at(5), at(4)], [at(3), at(2)], [at(1)]]);
    expect(cursors).toEqual([encodeCursor(`firings:${job}`, [at(4)]), encodeCursor(`firings:${job}`, [at(2)]), null]);
  });

  it("a firing recorded between page 1 and page 2 neither repeats nor skips one", async () => {
    const job = `pgfire-${suffix()}`;
    for (const n of [1, 2, 3, 4, 5]) await seedFiring(job, at(10 + n));
    const first = await get(`/api/admin/jobs/${job}/firings?limit=2`);
    await seedFiring(job, at(30));
    const rest = await walk(`/api/admin/jobs/${job}/firings`, "firings", { start: first.body.next_cursor });
    expect([...first.body.firings, ...rest.pages.flat()].map((f: any) => f.scheduled_for)).toEqual([15, 14, 13, 12, 11].map(at));
  });

  it("the list is one job's (the path is its filter); another job's cursor or a malformed one is 400; limit is 1–200", async () => {
    const [a, b] = [`pgfire-a-${suffix()}`, `pgfire-b-${suffix()}`];
    await seedFiring(a, at(1));
    await seedFiring(b, at(2));
    expect((await get(`/api/admin/jobs/${a}/firings`)).body).toMatchObject({
      firings: [{ job_id: a, scheduled_for: at(1) }],
      next_cursor: null,
    });
    await expectCursorsRefused(`/api/admin/jobs/${a}/firings`, encodeCursor(`firings:${b}`, [at(2)]));
    await expectLimitBounds(`/api/admin/jobs/${a}/firings`, 200);
  });
});

describe("ISSUE23 one paging module (src/http/admin/paging.ts) serves every list", () => {
  it('ISSUE23 every GET with a `cursor` query parameter in the OpenAPI document refuses each kind of bad cursor with 400 invalid.request "cursor is not valid for this list"', async () => {
    const chats = chatApp();
    const sessionId = (await chat(chats, `pg-any-${suffix()}`, "x")).session_id;
    const doc = (await get("/openapi.json", chats)).body;
    const lists = Object.entries(doc.paths)
      .filter(([, ops]: [string, any]) => ops.get?.parameters?.some((p: any) => p.in === "query" && p.name === "cursor"))
      .map(([path]) => path)
      .sort();
    expect(lists).toEqual([
      "/api/admin/approvals",
      "/api/admin/chat/generations",
      "/api/admin/chat/sessions",
      "/api/admin/chat/sessions/{session_id}/messages",
      "/api/admin/chat/sessions/{session_id}/snapshots",
      "/api/admin/config/versions",
      "/api/admin/env-requests",
      "/api/admin/jobs",
      "/api/admin/jobs/{job_id}/firings",
      "/api/admin/keys",
      "/api/admin/runs",
    ]);
    const foreign = encodeCursor("another-list", [at(1), "x"]);
    for (const path of lists) {
      await expectCursorsRefused(path.replace("{session_id}", sessionId).replace("{job_id}", "pg-any-job"), foreign, chats);
    }
  });
});

describe("Lists in the OpenAPI document", () => {
  const LISTS = [
    { path: "/api/admin/runs", key: "runs", max: 200, filters: ["agent_id", "status", "caller_id", "from", "to"] },
    { path: "/api/admin/approvals", key: "approvals", max: 200, filters: ["status", "agent_id"] },
    { path: "/api/admin/chat/sessions", key: "sessions", max: 200, filters: ["agent_id", "user_id", "room_id", "channel"] },
    { path: "/api/admin/chat/sessions/{session_id}/messages", key: "messages", max: 200, filters: [] },
    { path: "/api/admin/jobs", key: "jobs", max: 500, filters: ["agent_id"] },
    { path: "/api/admin/jobs/{job_id}/firings", key: "firings", max: 200, filters: [] },
    { path: "/api/admin/keys", key: "keys", max: 200, filters: [] },
  ];

  it("every list's operation documents limit, cursor, its filters, its items and next_cursor, and a 400", async () => {
    const doc = (await get("/openapi.json")).body;
    for (const list of LISTS) {
      const op = doc.paths[list.path].get;
      const query = Object.fromEntries(op.parameters.filter((p: any) => p.in === "query").map((p: any) => [p.name, p]));
      expect(Object.keys(query).sort(), list.path).toEqual(["cursor", "limit", ...list.filters].sort());
      expect(query.limit.schema, list.path).toMatchObject({ type: "integer", minimum: 1, maximum: list.max, default: 50 });
      expect(query.cursor.schema, list.path).toMatchObject({ type: "string" });
      expect(query.cursor.required ?? false, list.path).toBe(false);
      const body = op.responses["200"].content["application/json"].schema;
      expect(body.properties[list.key].type, list.path).toBe("array");
      expect(body.properties.next_cursor, list.path).toMatchObject({ type: ["string", "null"] });
      expect(body.required, list.path).toEqual(expect.arrayContaining([list.key, "next_cursor"]));
      expect(Object.keys(op.responses), list.path).toContain("400");
    }
  });
});

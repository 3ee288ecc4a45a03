/**
 * Issue 23 "the alarm is the watchdog and the shipper, never the starter", for runs resumed by an approval
 * decision (D-059): the deciding call starts the run itself, inline, answers the approver before the run ends,
 * and never lets a run execute twice — two decisions together, a decision racing the alarm, a deny racing a
 * cancel — and an eviction right after the decision is resumed by the watchdog with nothing lost or repeated.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { validateRunLog } from "../../src/runs/events";
import { runObjectId } from "../../src/runs/ids";
import { WATCHDOG_MS } from "../../src/sessions/capabilities";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, type App, appFor, call, invocations, registerTestTools, runDetail, until, waitForRun } from "../support/runs";

registerTestTools();

type Ev = { event_type: string; payload: Record<string, unknown> };
const label = () => crypto.randomUUID().slice(0, 8);
const send = (id: string) => ({ tool_calls: [{ id, name: "test__send", arguments: JSON.stringify({ to: "ops@example.com", text: id }) }] });
const stubOf = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));
const types = (events: Ev[]) => events.map((e) => e.event_type);
const count = (events: Ev[], type: string) => events.filter((e) => e.event_type === type).length;
const decide = (app: App, approvalId: string, decision: "approve" | "deny", reason?: string) =>
  call(app, "POST", `/api/admin/approvals/${approvalId}`, { decision, ...(reason ? { reason } : {}) }, ADMIN);

/** A chat message in `room` (POST /v1/chat/messages, 202): its run id. Messages of one room share a session. */
async function say(app: App, room: string, message: string): Promise<string> {
  const res = await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: room, agent_id: "main", message });
  if (res.status !== 202) throw new Error(`POST /v1/chat/messages answered ${res.status}: ${res.text}`);
  return res.body.id as string;
}

/** Waits until run `id` waits for an approval; its approval id. */
async function pausedFor(app: App, id: string): Promise<string> {
  await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
  const requested = (await runDetail(app, id)).events.find((e: Ev) => e.event_type === "approval.requested");
  return requested.payload.approval_id as string;
}

/**
 * Takes the object's alarm away: the stored one is deleted and no alarm set from now on ever fires, while the
 * object still reads back the alarm it asked for (as it would a real one not yet due). Returns the alarm times
 * asked for (ms ahead of the call) and a function that gives the object its real alarm back.
 */
async function withoutAlarms(stub: DurableObjectStub): Promise<{ asked: number[]; restore: () => Promise<void> }> {
  const asked: number[] = [];
  await runInDurableObject(stub, async (_i, state: DurableObjectState) => {
    await state.storage.deleteAlarm();
    let armed: number | null = null;
    const storage = state.storage as {
      setAlarm: DurableObjectStorage["setAlarm"];
      getAlarm: DurableObjectStorage["getAlarm"];
      deleteAlarm: DurableObjectStorage["deleteAlarm"];
    };
    storage.setAlarm = async (at: number | Date) => {
      asked.push(Number(at) - Date.now());
      armed = Number(at);
    };
    storage.getAlarm = async () => armed;
    storage.deleteAlarm = async () => {
      armed = null;
    };
  });
  const restore = () =>
    runInDurableObject(stub, (_i, state: DurableObjectState) => {
      for (const k of ["setAlarm", "getAlarm", "deleteAlarm"]) delete (state.storage as unknown as Record<string, unknown>)[k];
    });
  return { asked, restore };
}

describe("ISSUE23 a run resumed by an approval decision starts inline (D-059)", () => {
  it("ISSUE23 resume inline: with no alarm able to fire, approving answers the approver while the run goes on, and the run completes; the one alarm asked for is the watchdog", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [send("s1"), { content: "sent it", delay_ms: 800 }]);
    const app = appFor(runConfig(host));
    const id = await say(app, `room-${label()}`, "tell ops");
    const approvalId = await pausedFor(app, id);
    const { asked, restore } = await withoutAlarms(stubOf(id));

    const decided = await decide(app, approvalId, "approve", "expected");
    expect(decided.status).toBe(200);
    expect(decided.body).toMatchObject({ approval_id: approvalId, status: "approved", decided_by: "admin" });
    // The approver has the answer while the model (800 ms) is still answering the resumed run.
    expect((await call(app, "GET", `/v1/runs/${id}`)).body.status).toBe("running");
    const run = await waitForRun(app, id, undefined, 5_000);
    expect(run).toMatchObject({ status: "completed", output: "sent it", tool_calls: 1 });
    await restore();

    // The watchdog; the shipping window's backup alarm (D-052), asked for first by the decision's index row, is later.
    expect(Math.min(...asked)).toBeGreaterThan(0);
    expect(Math.min(...asked)).toBeLessThanOrEqual(WATCHDOG_MS);
    expect(invocations.filter((i) => i.runId === id).map((i) => i.toolCallId)).toEqual(["s1"]);
    expect(await bodiesSentTo(host)).toHaveLength(2);
    const events: Ev[] = (await runDetail(app, id)).events;
    expect(types(events)).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "approval.requested",
      "approval.decided",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
    expect(validateRunLog(events as never)).toBeNull();
  });

  it("ISSUE23 resume inline: a denial, and a decision that finds its approval expired (410), resume the run without the alarm too", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [send("d1"), { content: "not sent" }, send("e1"), { content: "too late" }]);
    const app = appFor(runConfig(host));
    const room = `room-${label()}`;
    const denied = await say(app, room, "one");
    const deniedApproval = await pausedFor(app, denied);
    const { restore } = await withoutAlarms(stubOf(denied));
    await decide(app, deniedApproval, "deny", "not today");
    const a = await waitForRun(app, denied, undefined, 5_000);
    expect(a.output).toBe("not sent");
    expect(a.trace.tool_execution_results[0].error).toBe("denied by admin: not today");

    const expired = await say(app, room, "two");
    const expiredApproval = await pausedFor(app, expired);
    await runInDurableObject(stubOf(expired), (_i, state: DurableObjectState) => {
      state.storage.sql.exec(
        "UPDATE approvals SET expires_at = ? WHERE id = ?",
        new Date(Date.now() - 1000).toISOString(),
        expiredApproval,
      );
    });
    expect((await decide(app, expiredApproval, "approve")).status).toBe(410);
    const b = await waitForRun(app, expired, undefined, 5_000);
    expect(b.output).toBe("too late");
    expect(b.trace.tool_execution_results[0].error).toBe(`approval ${expiredApproval} expired before anyone decided; the call was not run`);
    await restore();
    expect(invocations.filter((i) => i.runId === denied || i.runId === expired)).toEqual([]);
    expect(await bodiesSentTo(host)).toHaveLength(4);
  });
});

describe("ISSUE23 exactly once when decisions race", () => {
  it("ISSUE23 two approvals of one session's two waiting runs decided together, racing the alarm: each run resumes once, one at a time; 4 model calls, 2 tool calls", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [send("a1"), send("b1"), { content: "sent it" }, { content: "sent it" }]);
    const app = appFor(runConfig(host));
    const room = `room-${label()}`;
    const runA = await say(app, room, "first");
    const approvalA = await pausedFor(app, runA);
    const runB = await say(app, room, "second");
    const approvalB = await pausedFor(app, runB);
    expect(runObjectId(runA)).toBe(runObjectId(runB));

    const [da, db] = await Promise.all([
      decide(app, approvalA, "approve"),
      decide(app, approvalB, "approve"),
      runDurableObjectAlarm(stubOf(runA)),
    ]);
    expect([da.status, db.status]).toEqual([200, 200]);
    const [a, b] = [await waitForRun(app, runA), await waitForRun(app, runB)];
    expect([a.output, b.output]).toEqual(["sent it", "sent it"]);
    expect(await bodiesSentTo(host)).toHaveLength(4);
    expect(invocations.filter((i) => i.runId === runA).map((i) => i.toolCallId)).toEqual(["a1"]);
    expect(invocations.filter((i) => i.runId === runB).map((i) => i.toolCallId)).toEqual(["b1"]);
    for (const id of [runA, runB]) {
      const events: Ev[] = (await runDetail(app, id)).events;
      expect(validateRunLog(events as never)).toBeNull();
      expect([count(events, "run.started"), count(events, "approval.decided"), count(events, "tool.result")]).toEqual([1, 1, 1]);
      expect([count(events, "model.requested"), count(events, "run.completed")]).toEqual([2, 1]);
    }
  });

  it("ISSUE23 the same approval decided twice at once: one 200, one 409, the run resumes once", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [send("s1"), { content: "sent it" }]);
    const app = appFor(runConfig(host));
    const id = await say(app, `room-${label()}`, "tell ops");
    const approvalId = await pausedFor(app, id);
    const answers = await Promise.all([decide(app, approvalId, "approve"), decide(app, approvalId, "approve")]);
    expect(answers.map((r) => r.status).sort()).toEqual([200, 409]);
    expect((await waitForRun(app, id)).output).toBe("sent it");
    expect(await bodiesSentTo(host)).toHaveLength(2);
    expect(invocations.filter((i) => i.runId === id)).toHaveLength(1);
    expect(count((await runDetail(app, id)).events, "approval.decided")).toBe(1);
  });

  it("ISSUE23 a denial racing a cancel: the run ends cancelled once, the tool never runs", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [send("s1"), { content: "never seen", delay_ms: 1_500 }]);
    const app = appFor(runConfig(host));
    const id = await say(app, `room-${label()}`, "tell ops");
    const approvalId = await pausedFor(app, id);
    const [denied, cancelled] = await Promise.all([decide(app, approvalId, "deny"), call(app, "POST", `/v1/runs/${id}/cancel`)]);
    expect(denied.status).toBe(200);
    expect(cancelled.status).toBe(202);
    const run = await waitForRun(app, id);
    expect(run.status).toBe("cancelled");
    expect(invocations.filter((i) => i.runId === id)).toEqual([]);
    const events: Ev[] = (await runDetail(app, id)).events;
    expect(validateRunLog(events as never)).toBeNull();
    expect([count(events, "run.cancelled"), count(events, "run.completed")]).toEqual([1, 0]);
  });
});

/** Kills the object abruptly (a crash or a deploy): in-flight work is dropped, storage stays. */
async function crash(stub: DurableObjectStub): Promise<void> {
  await runInDurableObject(stub, (_i, state: DurableObjectState) => {
    state.abort("simulated crash");
  }).catch(() => {});
}

/** A chat message in a new room: its run id and session id. */
async function sayNew(app: App): Promise<{ id: string; sessionId: string }> {
  const res = await call(app, "POST", "/v1/chat/messages", {
    user_id: "u",
    room_id: `room-${label()}`,
    agent_id: "main",
    message: "tell ops",
  });
  return { id: res.body.id as string, sessionId: res.body.session_id as string };
}

/** The session's transcript as [role, content] pairs. */
async function transcript(app: App, sessionId: string): Promise<[string, string][]> {
  const res = await call(app, "GET", `/api/admin/chat/sessions/${sessionId}/messages?limit=100`, undefined, ADMIN);
  return res.body.messages.map((m: { role: string; content: string }) => [m.role, m.content]);
}

const RESUMED = [
  "run.created",
  "run.started",
  "model.requested",
  "tool.call",
  "approval.requested",
  "approval.decided",
  "tool.result",
  "model.requested",
];

describe("ISSUE23 eviction and crash after a decision", () => {
  it("ISSUE23 evicted right after the decision: the run started by the decision ends once; the watchdog alarm that follows repeats nothing", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [send("s1"), { content: "sent it", delay_ms: 300 }]);
    const app = appFor(runConfig(host));
    const { id, sessionId } = await sayNew(app);
    const approvalId = await pausedFor(app, id);
    expect((await decide(app, approvalId, "approve")).status).toBe(200);
    await evictDurableObject(stubOf(id)); // graceful: the run in flight ends before the instance goes
    const run = await waitForRun(app, id);
    expect(run).toMatchObject({ status: "completed", output: "sent it", tool_calls: 1 });
    await runDurableObjectAlarm(stubOf(id)); // the watchdog on the new instance finds nothing to resume
    expect(await bodiesSentTo(host)).toHaveLength(2);
    expect(invocations.filter((i) => i.runId === id).map((i) => i.toolCallId)).toEqual(["s1"]);
    const events: Ev[] = (await runDetail(app, id)).events;
    expect(types(events)).toEqual([...RESUMED, "run.completed"]);
    expect(validateRunLog(events as never)).toBeNull();
    expect((await transcript(app, sessionId)).map(([role]) => role)).toEqual(["user", "assistant", "tool", "assistant"]);
  });

  it("ISSUE23 crashed mid-run right after the decision: the watchdog alarm (≤ WATCHDOG_MS) resumes the run; the tool ran once, one reply, one run.completed", async () => {
    const host = uniqueHost("script");
    // The model call after the tool round is answered late: the object is killed while it waits.
    await scriptProvider(host, [send("s1"), { content: "lost", delay_ms: 2_000 }, { content: "sent it" }]);
    const app = appFor(runConfig(host));
    const { id, sessionId } = await sayNew(app);
    const approvalId = await pausedFor(app, id);
    expect((await decide(app, approvalId, "approve")).status).toBe(200);
    await until(async () => count((await runDetail(app, id)).events, "model.requested") === 2);
    const before = Date.now();
    await crash(stubOf(id));
    const alarm = await runInDurableObject(stubOf(id), (_i, state: DurableObjectState) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
    expect((alarm as number) - before).toBeLessThanOrEqual(WATCHDOG_MS); // a second, not 60 s
    await runDurableObjectAlarm(stubOf(id));
    const run = await waitForRun(app, id);
    expect(run).toMatchObject({ status: "completed", output: "sent it", tool_calls: 1 });
    expect(invocations.filter((i) => i.runId === id).map((i) => i.toolCallId)).toEqual(["s1"]);
    expect(await bodiesSentTo(host)).toHaveLength(3); // the lost call is made again; it had no effect
    const events: Ev[] = (await runDetail(app, id)).events;
    expect(validateRunLog(events as never)).toBeNull();
    expect(types(events)).toEqual([...RESUMED, "model.requested", "run.completed"]);
    expect(await transcript(app, sessionId)).toEqual([
      ["user", "tell ops"],
      ["assistant", ""],
      ["tool", expect.any(String)],
      ["assistant", "sent it"],
    ]);
  }, 20_000);
});

/**
 * Issue 23 D-069: a turn the Worker waited for gives its approvals-backlog slot back in the isolate's copy when its
 * run ends without an approval pending, so a caller's sequential turns read the backlog from D1 once per
 * `BACKLOG_CACHE_MS` instead of once every `maxPendingPerCaller` turns; a run that pauses for an approval keeps its
 * slot, so a backlog at the limit still refuses early. Checks that find the copy stale while a read is in flight wait
 * for that read. Exact counts of the backlog's D1 read, with the copies' clock held still (no timers).
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { forgetConfigInForce, postConfigVersion } from "../../src/config/versions";
import { BACKLOG_CACHE_MS, backlogClock, forgetBacklog, giveSlotBack } from "../../src/runs/backlog";
import { refuseWhenApprovalsBacklogged } from "../../src/runs/submit";
import { forgetAdminGenerations } from "../../src/storage/admin-generation";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ALICE, type App, appFor, call, postRunAndWait, registerTestTools } from "../support/runs";

registerTestTools();

const realClock = backlogClock.now;
let undoPrepare: (() => void) | null = null;
afterEach(() => {
  backlogClock.now = realClock;
  forgetBacklog();
  undoPrepare?.();
  undoPrepare = null;
});

/** The backlog read's text (src/runs/approvals.ts pendingApprovalCounts). */
const BACKLOG_READ = "COALESCE(SUM(caller = ?3), 0) AS mine FROM approvals";

/** Counts the backlog reads prepared in this isolate from now on (the Worker and every SessionDO share it). */
function countBacklogReads(): () => number {
  let n = 0;
  const proto = Object.getPrototypeOf(env.DB) as { prepare: (q: string) => unknown };
  const original = proto.prepare;
  proto.prepare = function (this: unknown, q: string) {
    if (q.includes(BACKLOG_READ)) n++;
    return original.call(this, q);
  };
  undoPrepare = () => {
    proto.prepare = original;
  };
  return () => n;
}

/** The copies' clock held at one instant: every turn of the test falls inside one `BACKLOG_CACHE_MS`. */
function holdClock(): number {
  const t0 = Date.now();
  backlogClock.now = () => t0;
  return t0;
}

const configFor = (host: string, agentId: string, perCaller: number) =>
  runConfig(host, { agentId, policy: { approvals: { ttlSeconds: 3600, maxPendingPerAgent: 20, maxPendingPerCaller: perCaller } } });

/** A fresh session's turn through `POST /v1/runs` with `Prefer: wait`: its run's status. */
async function waitedRun(app: App, agentId: string): Promise<{ status: number; run: string }> {
  const res = await postRunAndWait(app, { agent_id: agentId, message: "hello" });
  const body = (await res.json()) as { status?: string };
  return { status: res.status, run: body.status ?? "" };
}

/** A turn through `/v1/chat/completions` (which stops waiting at a pause): HTTP status and the run's status. */
async function completion(app: App, agentId: string, user: string): Promise<{ status: number; run: string }> {
  const res = await call(app, "POST", "/v1/chat/completions", {
    model: `agent:${agentId}`,
    user,
    messages: [{ role: "user", content: "hello" }],
  });
  const runId = res.headers.get("X-Run-Id");
  const run = runId ? (await call(app, "GET", `/v1/runs/${runId}`)).body.status : "";
  return { status: res.status, run };
}

const pendingInD1 = async (agentId: string) =>
  (
    await env.DB.prepare("SELECT COUNT(*) AS n FROM approvals WHERE agent_id = ?1 AND status = 'pending'")
      .bind(agentId)
      .first<{ n: number }>()
  )?.n;

const testSend = (id: string) => ({
  tool_calls: [{ id, name: "test__send", arguments: JSON.stringify({ to: "ops@example.com", text: "deploy finished" }) }],
});

describe("ISSUE23 D-069 an awaited run that ended without an approval gives its backlog slot back", () => {
  it("ISSUE23 with the caller limit L = 3, L+5 awaited turns (Prefer: wait and /v1/chat/completions) within BACKLOG_CACHE_MS make exactly one backlog read", async () => {
    const agentId = `slots-${crypto.randomUUID().slice(0, 8)}`;
    const L = 3;
    const app = appFor(configFor(uniqueHost("ok"), agentId, L));
    holdClock();
    const reads = countBacklogReads();
    const answers: { status: number; run: string }[] = [];
    for (let i = 0; i < L + 5; i++) answers.push(i % 2 === 0 ? await waitedRun(app, agentId) : await completion(app, agentId, "slots-1"));
    expect(answers).toEqual(Array.from({ length: L + 5 }, () => ({ status: 200, run: "completed" })));
    // Before D-069 each run was assumed to ask for an approval until the copy was read again: reads at turns 1, 4, 7.
    expect(reads()).toBe(1);
  });

  it("ISSUE23 runs that pause for an approval keep their slot: at the limit the next turn is refused early (429), and the slot a completed run gave back is not counted", async () => {
    const host = uniqueHost("script");
    const agentId = `slots-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ content: "done" }, testSend("p1"), testSend("p2")]);
    const app = appFor(configFor(host, agentId, 2));
    holdClock();
    const reads = countBacklogReads();
    // Each in a conversation of its own (a paused run holds its session's queue).
    expect(await completion(app, agentId, "slots-2a")).toEqual({ status: 200, run: "completed" }); // read 1: 0 pending
    expect(await completion(app, agentId, "slots-2b")).toEqual({ status: 200, run: "awaiting_approval" });
    expect(await completion(app, agentId, "slots-2c")).toEqual({ status: 200, run: "awaiting_approval" });
    expect(await pendingInD1(agentId)).toBe(2);
    // The two paused runs fill the copy (0 + 2 admitted = limit): D1 is asked, and it has 2 pending.
    const refused = await call(app, "POST", "/v1/chat/completions", {
      model: `agent:${agentId}`,
      user: "slots-2d",
      messages: [{ role: "user", content: "hello" }],
    });
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe("rate.limited");
    expect(reads()).toBe(2);
    // And from the copy now, without D1, while it serves.
    expect((await waitedRun(app, agentId)).status).toBe(429);
    expect(reads()).toBe(2);
  });
});

describe("ISSUE23 D-069 the isolate's copy, checked directly", () => {
  it("ISSUE23 checks that find the copy stale while a read is in flight wait for it: 6 concurrent checks, one read", async () => {
    const agentId = `slots-${crypto.randomUUID().slice(0, 8)}`;
    const reads = countBacklogReads();
    const t = Date.now();
    const checks = Array.from({ length: 6 }, () =>
      refuseWhenApprovalsBacklogged(env.DB, agentId, 20, { key: "api:alice", maxPending: 10 }, t),
    );
    expect((await Promise.all(checks)).every((a) => a !== null)).toBe(true);
    expect(reads()).toBe(1);
  });

  it("ISSUE23 a slot goes back once, and only to the read that counted it", async () => {
    const agentId = `slots-${crypto.randomUUID().slice(0, 8)}`;
    const reads = countBacklogReads();
    const t = Date.now();
    const check = (at: number) => refuseWhenApprovalsBacklogged(env.DB, agentId, 20, { key: "api:alice", maxPending: 2 }, at);
    const first = await check(t); // read 1
    const second = await check(t + 1); // from the copy: 0 + 1 < 2
    expect(reads()).toBe(1);
    giveSlotBack(second as never);
    giveSlotBack(second as never); // a second call gives nothing more back
    expect(await check(t + 2)).not.toBeNull(); // 0 + 1 < 2 (first is still counted)
    expect(reads()).toBe(1);
    expect(await check(t + 3)).not.toBeNull(); // 0 + 2 = limit: read 2
    expect(reads()).toBe(2);
    // A read newer than the admission is not touched by it: the new copy counts only what it admitted since.
    const late = await check(t + BACKLOG_CACHE_MS + 3); // read 3, admitted 1
    expect(reads()).toBe(3);
    giveSlotBack(first as never); // admitted by read 1: no effect on read 3's copy
    expect(await check(t + BACKLOG_CACHE_MS + 4)).not.toBeNull(); // 0 + 1 < 2
    expect(reads()).toBe(3);
    expect(await check(t + BACKLOG_CACHE_MS + 5)).not.toBeNull(); // 0 + 2 = limit: read 4
    expect(reads()).toBe(4);
    expect(late).not.toBeNull();
  });
});

describe("ISSUE23 D-069 the WebSocket route gives slots back too", () => {
  // Last in the file: it puts its configuration in force in D1, which the session objects read per message.
  it("ISSUE23 with L = 3, L+5 socket turns that complete within BACKLOG_CACHE_MS make exactly one backlog read", async () => {
    const agentId = `slots-${crypto.randomUUID().slice(0, 8)}`;
    const L = 3;
    const config = configFor(uniqueHost("ok"), agentId, L);
    const posted = await postConfigVersion(env.DB, config, { actor: "test", now: new Date() });
    expect(posted.ok).toBe(true);
    forgetAdminGenerations();
    forgetConfigInForce();
    const app = appFor(config);
    holdClock();
    const reads = countBacklogReads();
    const res = await app.request(
      `https://gateway.test/v1/chat/socket?agent_id=${agentId}&room_id=slots&user_id=u1`,
      { headers: { Upgrade: "websocket", Authorization: `Bearer ${ALICE}` } },
      env,
    );
    const ws = res.webSocket;
    if (res.status !== 101 || !ws) throw new Error(`upgrade answered ${res.status}`);
    ws.accept();
    const runs: Record<string, string> = {};
    ws.addEventListener("message", (e) => {
      const f = JSON.parse(e.data as string) as { type: string; id: string; run?: { status: string } };
      if (f.type === "run" && f.run) runs[f.id] = f.run.status;
      if (f.type === "error") runs[f.id] = "error";
    });
    for (let i = 0; i < L + 5; i++) {
      ws.send(JSON.stringify({ type: "message", id: `m${i}`, text: "hello" }));
      const deadline = Date.now() + 10_000;
      while (!runs[`m${i}`] && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    }
    ws.close();
    expect(runs).toEqual(Object.fromEntries(Array.from({ length: L + 5 }, (_, i) => [`m${i}`, "completed"])));
    // Without the slot given back: reads at turns 1, 4, 7.
    expect(reads()).toBe(1);
  });
});

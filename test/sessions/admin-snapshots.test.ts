/**
 * Issue 21 item 3: snapshots can be listed and restored. A run whose model calls `save_snapshot` stores the session's
 * full S4 checkpoint; admins list and read it, and restoring it makes the session's checkpoint equal the snapshot
 * (state, recent messages, trace tail). A snapshot restores only into its own session.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, appFor, call, until, waitForRun } from "../support/runs";
import { auditBacklog } from "../support/session";

const notes = (patch: Record<string, unknown>) => `<<<NOTES_JSON>>>${JSON.stringify(patch)}<<<END_NOTES_JSON>>>`;
const room = () => `room-${crypto.randomUUID().slice(0, 8)}`;

async function gateway() {
  const host = uniqueHost("script");
  const app = appFor(runConfig(host, { agent: { tools: { allow: ["save_snapshot"] } } }));
  /** Sends a chat message in `r` and waits for its run to end. */
  const say = async (r: string, message: string) => {
    const sent = await call(app, "POST", "/v1/chat/messages", { user_id: "snap-user", room_id: r, agent_id: "main", message });
    expect(sent.status).toBe(202);
    expect((await waitForRun(app, sent.body.id)).status).toBe("completed");
    return sent.body as { id: string; session_id: string };
  };
  const admin = (method: string, path: string) => call(app, method, path, undefined, ADMIN);
  return { host, app, say, admin };
}

describe("ISSUE21-3 snapshots can be listed and restored", () => {
  it("ISSUE21-3 save_snapshot in a run → listed, read whole, and restore makes the checkpoint equal the snapshot", async () => {
    const g = await gateway();
    const r = room();
    const key = `agent:main:http:alice~${r}:dm:snap-user`;
    await scriptProvider(g.host, [
      { content: `Goal noted.${notes({ set_goals: ["ship v1"], add_decisions: ["use R2"], unknown_key: 1 })}` },
      { tool_calls: [{ id: "call_snap1", name: "save_snapshot", arguments: JSON.stringify({ message: "before the pivot" }) }] },
      { content: "Snapshot saved." },
      { content: `Pivoting.${notes({ set_goals: ["ship v2"], add_decisions: ["use D1"] })}` },
      { content: "Back on v1." },
    ]);
    const first = await g.say(r, "plan v1");
    const second = await g.say(r, "save a snapshot");
    await g.say(r, "pivot to v2");

    const listed = await g.admin("GET", `/api/admin/chat/sessions/${first.session_id}/snapshots`);
    expect(listed.status).toBe(200);
    expect(listed.body).toEqual({
      session_key: key,
      snapshots: [
        { snapshot_id: expect.stringMatching(/^snap_[0-9a-f]{24}$/), session_id: first.session_id, created_at: expect.any(String) },
      ],
      next_cursor: null,
    });
    const snapshotId = listed.body.snapshots[0].snapshot_id as string;

    const got = await g.admin("GET", `/api/admin/chat/sessions/${first.session_id}/snapshots/${snapshotId}`);
    expect(got.status).toBe(200);
    const stub = env.SESSIONS.getByName(key);
    const identity = { sessionKey: key, agentId: "main" };
    expect(got.body).toMatchObject({
      snapshot_id: snapshotId,
      session_key: key,
      session_id: first.session_id,
      run_id: second.id,
      tool_call_id: "call_snap1",
      message: "before the pivot",
    });
    const snap = got.body.checkpoint;
    expect(snap.state.goals).toEqual(["ship v1"]);
    expect(snap.state.decisions).toEqual(["use R2"]);
    // The recent messages as they were when the model called save_snapshot: the first turn, the second's message and
    // the assistant turn that made the call (no text of its own).
    expect(snap.recent_messages.map((m: any) => [m.role, m.content])).toEqual([
      ["user", "plan v1"],
      ["assistant", "Goal noted."],
      ["user", "save a snapshot"],
      ["assistant", ""],
    ]);
    expect(snap.trace_tail).toHaveLength(1);
    expect(JSON.parse(snap.trace_tail[0])).toMatchObject({ kind: expect.any(String) });

    // Another run's NOTES changed the checkpoint since.
    const before = await stub.checkpoint(identity);
    expect(before.state.goals).toEqual(["ship v2"]);
    expect(before.recent_messages.length).toBeGreaterThan(snap.recent_messages.length);

    const restored = await g.admin("POST", `/api/admin/chat/sessions/${first.session_id}/snapshots/${snapshotId}/restore`);
    expect(restored.status).toBe(200);
    const now = await stub.checkpoint(identity);
    expect(restored.body).toEqual({
      session_key: key,
      snapshot_id: snapshotId,
      session_id: now.session_id,
      previous_session_id: first.session_id,
      checkpoint: now,
    });
    expect({ state: now.state, recent_messages: now.recent_messages, trace_tail: now.trace_tail }).toEqual({
      state: snap.state,
      recent_messages: snap.recent_messages,
      trace_tail: snap.trace_tail,
    });
    expect(now.revision).toBe(before.revision + 1);
    // The generation before the restore is archived and resumable; the restored one is current.
    const generations = await g.admin("GET", `/api/admin/chat/generations?session_key=${encodeURIComponent(key)}`);
    expect(generations.body.generations.map((x: any) => [x.session_id, x.status])).toEqual([
      [now.session_id, "current"],
      [first.session_id, "archived"],
    ]);
    // Audited, with the snapshot and both generations.
    await until(async () => (await auditBacklog(stub)) === 0);
    const audit = await g.admin("GET", `/api/admin/audit?agent_id=main&date=${new Date().toISOString().slice(0, 10)}`);
    const restoredEvent = audit.text
      .split("\n")
      .filter(Boolean)
      .map((l: string) => JSON.parse(l))
      .find((e: any) => e.event_type === "snapshot.restored" && e.payload.snapshot_id === snapshotId);
    expect(restoredEvent).toMatchObject({
      actor: "admin",
      payload: { snapshot_id: snapshotId, session_id: now.session_id, previous_session_id: first.session_id },
    });
    // The next run continues from the snapshot: the model sees the restored turns, not the pivot.
    await g.say(r, "continue");
    const last = (await bodiesSentTo(g.host)).at(-1);
    const seen = JSON.stringify(last?.messages);
    expect(seen).toContain("plan v1");
    expect(seen).toContain("save a snapshot");
    expect(seen).not.toContain("pivot to v2");
  });

  it("ISSUE21-3 restoring a snapshot into another session is refused with 409, and nothing changes", async () => {
    const g = await gateway();
    const mine = room();
    const theirs = room();
    await scriptProvider(g.host, [
      { tool_calls: [{ id: "call_snap2", name: "save_snapshot", arguments: "{}" }] },
      { content: "saved" },
      { content: `Other.${notes({ set_goals: ["theirs"] })}` },
    ]);
    const a = await g.say(mine, "snapshot please");
    const b = await g.say(theirs, "hello");
    const snapshotId = (await g.admin("GET", `/api/admin/chat/sessions/${a.session_id}/snapshots`)).body.snapshots[0].snapshot_id;
    const otherKey = `agent:main:http:alice~${theirs}:dm:snap-user`;
    const before = await env.SESSIONS.getByName(otherKey).checkpoint({ sessionKey: otherKey, agentId: "main" });

    const refused = await g.admin("POST", `/api/admin/chat/sessions/${b.session_id}/snapshots/${snapshotId}/restore`);
    expect(refused).toMatchObject({
      status: 409,
      body: {
        error: {
          code: "conflict",
          message: `snapshot ${snapshotId} was taken in another session (agent:main:http:alice~${mine}:dm:snap-user); a snapshot can be restored only into its own session`,
        },
      },
    });
    expect(await env.SESSIONS.getByName(otherKey).checkpoint({ sessionKey: otherKey, agentId: "main" })).toEqual(before);
    // Nor is it listed or readable there.
    expect((await g.admin("GET", `/api/admin/chat/sessions/${b.session_id}/snapshots`)).body.snapshots).toEqual([]);
    expect((await g.admin("GET", `/api/admin/chat/sessions/${b.session_id}/snapshots/${snapshotId}`)).status).toBe(404);
    expect((await g.admin("GET", "/api/admin/chat/sessions/ses_00000000000000000000000000000000/snapshots")).status).toBe(404);
  });

  it("ISSUE21-3 a restore while a run of the session is in progress is refused with 409, and nothing changes", async () => {
    const g = await gateway();
    const r = room();
    const key = `agent:main:http:alice~${r}:dm:snap-user`;
    await scriptProvider(g.host, [
      { tool_calls: [{ id: "call_snap3", name: "save_snapshot", arguments: "{}" }] },
      { content: "saved" },
      { content: "slow answer", delay_ms: 1500 },
    ]);
    const a = await g.say(r, "snapshot please");
    const snapshotId = (await g.admin("GET", `/api/admin/chat/sessions/${a.session_id}/snapshots`)).body.snapshots[0].snapshot_id;
    const slow = await call(g.app, "POST", "/v1/chat/messages", {
      user_id: "snap-user",
      room_id: r,
      agent_id: "main",
      message: "take your time",
    });
    const refused = await g.admin("POST", `/api/admin/chat/sessions/${a.session_id}/snapshots/${snapshotId}/restore`);
    expect(refused).toMatchObject({
      status: 409,
      body: { error: { code: "conflict", message: `a run of session ${key} is in progress; restore the snapshot when it has ended` } },
    });
    expect((await waitForRun(g.app, slow.body.id)).status).toBe("completed");
    const generations = await g.admin("GET", `/api/admin/chat/generations?session_key=${encodeURIComponent(key)}`);
    expect(generations.body.generations.map((x: any) => [x.session_id, x.status])).toEqual([[a.session_id, "current"]]);
  });
});

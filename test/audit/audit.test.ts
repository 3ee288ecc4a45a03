/**
 * Audit (S3 §3), the outbox → R2 path, hash chains, the read side and run bundles (DESIGN §4):
 * every lifecycle event reaches R2 exactly once, redacted, create-only; a failing R2 loses nothing;
 * a tampered or removed segment is found.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { BUNDLE_OBJECT, BUNDLE_PARTS, type BundlePart, parseBundle } from "../../src/audit/bundles";
import { AuditEvent, auditFromRunEvent } from "../../src/audit/event";
import { auditHead, enqueueAudit, outboxSize, putAuditSegments } from "../../src/audit/outbox";
import { auditPrefix, GENESIS, segmentBody, segmentKey, segmentSha256, verifySegments } from "../../src/audit/segments";
import { runObjectId } from "../../src/runs/ids";
import { createSql } from "../../src/storage/sql";
import { flushAudit } from "../support/audit";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, appFor, call, registerTestTools, runDetail, startRun, until, waitForRun } from "../support/runs";
import { auditBacklog, describeSession } from "../support/session";

registerTestTools();

const today = () => new Date().toISOString().slice(0, 10);
const stubOf = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));

async function auditLines(app: ReturnType<typeof appFor>, agentId: string): Promise<AuditEvent[]> {
  const res = await call(app, "GET", `/api/admin/audit?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("application/x-ndjson");
  return res.text
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}

function event(i: number, payload: Record<string, unknown> = {}): AuditEvent {
  return {
    event_id: `evt_${i}`,
    event_type: "tool.call",
    ts: `${today()}T00:00:${String(i % 60).padStart(2, "0")}.000Z`,
    run_id: "run_x",
    agent_id: "a",
    actor: "system",
    seq: i,
    payload,
    redactions: [],
  };
}

/** A bucket that fails its first `failures` puts, then behaves. */
function flakyBucket(bucket: R2Bucket, failures: number): R2Bucket & { puts: number } {
  let left = failures;
  const wrapper = {
    puts: 0,
    put: async (...args: Parameters<R2Bucket["put"]>) => {
      wrapper.puts++;
      if (left-- > 0) throw new Error("injected R2 failure");
      return bucket.put(...args);
    },
    get: (...args: Parameters<R2Bucket["get"]>) => bucket.get(...args),
    list: (...args: Parameters<R2Bucket["list"]>) => bucket.list(...args),
  };
  return wrapper as unknown as R2Bucket & { puts: number };
}

describe("S3 §3 audit events", () => {
  it("S3 §3 a run's lifecycle events reach R2 as audit events: exact fields, in order, seq continuous, actor named", async () => {
    const host = uniqueHost("script");
    const agentId = `aud-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ tool_calls: [{ id: "e1", name: "test__echo", arguments: "{}" }] }, { content: "done" }]);
    const app = appFor(runConfig(host, { agentId }));
    const id = await startRun(app, "audit me", agentId);
    await waitForRun(app, id);
    await until(async () => (await auditBacklog(stubOf(id))) === 0);
    const lines = await auditLines(app, agentId);
    expect(lines.map((e) => e.event_type)).toEqual([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
    expect(lines.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    for (const e of lines) {
      expect(AuditEvent.parse(e)).toEqual(e);
      expect(Object.keys(e)).toEqual(["event_id", "event_type", "ts", "run_id", "agent_id", "actor", "seq", "payload", "redactions"]);
    }
    expect(lines[0]?.actor).toBe("api:alice");
    expect(lines[1]?.actor).toBe("system");
    const events = (await runDetail(app, id)).events;
    expect(lines.map((e) => e.event_id)).toEqual(events.map((e: any) => e.event_id));
  });

  it("S3 §3 sensitive values are redacted before the write and `redactions` lists the JSON paths replaced", () => {
    const secret = "sk-live-0123456789abcdefghijklmnop";
    const audited = auditFromRunEvent(
      {
        event_id: "evt_1",
        event_type: "tool.call",
        ts: "2026-11-26T00:00:00.000Z",
        run_id: "run_1",
        agent_id: "main",
        seq: 4,
        payload: { tool: "http.get", args: { url: "https://x.test", token: secret, list: ["ok", `Bearer ${secret}`] } },
      },
      "system",
      [secret],
    );
    expect(audited.redactions).toEqual(["payload.args.token", "payload.args.list[1]"]);
    expect(JSON.stringify(audited)).not.toContain(secret);
    expect(audited.payload).toEqual({
      tool: "http.get",
      args: { url: "https://x.test", token: "[REDACTED:secret]", list: ["ok", "Bearer [REDACTED:secret]"] },
    });
  });

  it("an admin action (capability grant) is an audit event with actor admin", async () => {
    const host = uniqueHost("script");
    const agentId = `aud-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ content: "hi" }]);
    const app = appFor(runConfig(host, { agentId }));
    const res = await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: "r", agent_id: agentId, message: "hi" });
    await waitForRun(app, res.body.id);
    await call(app, "POST", `/api/admin/sessions/${res.body.session_id}/capabilities`, { grant: "net" }, ADMIN);
    await until(async () => (await auditBacklog(stubOf(res.body.id))) === 0);
    const granted = (await auditLines(app, agentId)).find((e) => e.event_type === "capability.granted");
    expect(granted).toMatchObject({
      run_id: null,
      actor: "admin",
      seq: 1,
      payload: { capability: "net", session_id: res.body.session_id },
    });
  });
});

describe("outbox → R2 (create-only, nothing lost, nothing duplicated)", () => {
  it("an existing segment key is never overwritten: other content there fails the flush, the events stay", async () => {
    const stub = env.SESSIONS.getByName(`agent:cox:http:r:dm:${crypto.randomUUID().slice(0, 8)}`);
    await describeSession(stub);
    await runInDurableObject(stub, async (_i, state: DurableObjectState) => {
      const sql = createSql(state.storage.sql);
      const stream = state.id.toString();
      enqueueAudit(sql, event(1));
      const key = segmentKey("cox", today(), Date.parse(event(1).ts), stream, 1); // D-064: keyed by its first event's time
      await env.AUDIT.put(key, "someone else's bytes\n");
      const r = await flushAudit({ sql, storage: state.storage, bucket: env.AUDIT, stream, agentId: "cox", now: () => 1_000 });
      expect(r.flushed).toBe(0);
      expect(r.retryAt).toBe(2_000);
      expect(await (await env.AUDIT.get(key))?.text()).toBe("someone else's bytes\n");
      expect(outboxSize(sql)).toBe(1);
    });
  });

  it("a flush whose write landed but whose confirmation was lost completes on retry without a second copy", async () => {
    const stub = env.SESSIONS.getByName(`agent:cox:http:r:dm:${crypto.randomUUID().slice(0, 8)}`);
    await describeSession(stub);
    await runInDurableObject(stub, async (_i, state: DurableObjectState) => {
      const sql = createSql(state.storage.sql);
      const stream = state.id.toString();
      for (let i = 1; i <= 3; i++) enqueueAudit(sql, event(i));
      // The exact bytes the flush will prepare are already there (written before a crash).
      const body = segmentBody({ stream, counter: 1, prev_sha256: GENESIS, events: 3 }, [event(1), event(2), event(3)]);
      const key = segmentKey("cox", today(), Date.parse(event(1).ts), stream, 1); // D-064: keyed by its first event's time
      await env.AUDIT.put(key, body);
      const r = await flushAudit({ sql, storage: state.storage, bucket: env.AUDIT, stream, agentId: "cox", now: () => 5_000 });
      expect(r).toEqual({ flushed: 3, retryAt: null });
      expect(auditHead(sql, today())).toEqual({ counter: 1, sha256: await segmentSha256(body) });
      const listed = await env.AUDIT.list({ prefix: `${auditPrefix("cox", today())}` });
      expect(listed.objects.filter((o) => o.key.includes(stream)).map((o) => o.key)).toEqual([key]);
    });
  });

  it("ISSUE23 D-064 a segment put by a pass that crashed before its commit, more events queued since: the retry prepares the same key, adopts it, and ships the rest as the next segment — each event once, the day verifies", async () => {
    const agentId = `adopt-${crypto.randomUUID().slice(0, 8)}`;
    const stub = env.SESSIONS.getByName(`agent:${agentId}:http:r:dm:u`);
    await describeSession(stub);
    await runInDurableObject(stub, async (_i, state: DurableObjectState) => {
      const sql = createSql(state.storage.sql);
      const stream = state.id.toString();
      for (let i = 1; i <= 2; i++) enqueueAudit(sql, { ...event(i), agent_id: agentId });
      // The pass puts its segment and is gone before it records anything.
      const crashed = await putAuditSegments({ sql, bucket: env.AUDIT, stream, agentId, now: () => 1_000 });
      expect(crashed.written.map((s) => [s.counter, s.events])).toEqual([[1, 2]]);
      expect(outboxSize(sql)).toBe(2);
      expect(auditHead(sql, today()).counter).toBe(0);
      enqueueAudit(sql, { ...event(3), agent_id: agentId });
      const r = await flushAudit({ sql, storage: state.storage, bucket: env.AUDIT, stream, agentId, now: () => 2_000 });
      expect(r).toEqual({ flushed: 3, retryAt: null });
      expect(outboxSize(sql)).toBe(0);
      const keys = (await env.AUDIT.list({ prefix: auditPrefix(agentId, today()) })).objects.map((o) => o.key);
      expect(keys).toEqual([
        segmentKey(agentId, today(), Date.parse(event(1).ts), stream, 1),
        segmentKey(agentId, today(), Date.parse(event(3).ts), stream, 2),
      ]);
      expect(auditHead(sql, today())).toEqual({
        counter: 2,
        sha256: await segmentSha256((await (await env.AUDIT.get(keys[1] as string))?.text()) as string),
      });
    });
    const app = appFor(runConfig(uniqueHost("script"), { agentId }));
    expect((await auditLines(app, agentId)).map((e) => e.seq)).toEqual([1, 2, 3]);
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toEqual({ ok: true, segments: 2, events: 3, streams: 1 });
  });

  it("ISSUE23 D-064 an object under the segment's key that is not this segment's shorter version (another head) is not adopted: the flush fails, nothing moves", async () => {
    const stub = env.SESSIONS.getByName(`agent:cox:http:r:dm:${crypto.randomUUID().slice(0, 8)}`);
    await describeSession(stub);
    await runInDurableObject(stub, async (_i, state: DurableObjectState) => {
      const sql = createSql(state.storage.sql);
      const stream = state.id.toString();
      for (let i = 1; i <= 2; i++) enqueueAudit(sql, event(i));
      const key = segmentKey("cox", today(), Date.parse(event(1).ts), stream, 1);
      const forged = segmentBody({ stream, counter: 1, prev_sha256: "f".repeat(64), events: 1 }, [event(1)]);
      await env.AUDIT.put(key, forged);
      const r = await flushAudit({ sql, storage: state.storage, bucket: env.AUDIT, stream, agentId: "cox", now: () => 3_000 });
      expect(r).toEqual({ flushed: 0, retryAt: 4_000 });
      expect(outboxSize(sql)).toBe(2);
      expect(auditHead(sql, today()).counter).toBe(0);
      expect(await (await env.AUDIT.get(key))?.text()).toBe(forged);
    });
  });

  it("injected R2 failures: 3 failed puts back off (1 s, 2 s, 4 s); after recovery every event is there exactly once, seq continuous", async () => {
    const agentId = `flaky-${crypto.randomUUID().slice(0, 8)}`;
    const stub = env.SESSIONS.getByName(`agent:${agentId}:http:r:dm:u`);
    await describeSession(stub);
    await runInDurableObject(stub, async (_i, state: DurableObjectState) => {
      const sql = createSql(state.storage.sql);
      const stream = state.id.toString();
      const bucket = flakyBucket(env.AUDIT, 3);
      for (let i = 1; i <= 1200; i++) enqueueAudit(sql, { ...event(i), agent_id: agentId });
      let clock = 10_000;
      const retries: (number | null)[] = [];
      for (let attempt = 0; attempt < 3; attempt++) {
        const r = await flushAudit({ sql, storage: state.storage, bucket, stream, agentId, now: () => clock });
        retries.push(r.retryAt === null ? null : r.retryAt - clock);
        expect(r.flushed).toBe(0);
        clock = r.retryAt as number;
      }
      expect(retries).toEqual([1000, 2000, 4000]);
      expect(outboxSize(sql)).toBe(1200);
      const r = await flushAudit({ sql, storage: state.storage, bucket, stream, agentId, now: () => clock });
      expect(r).toEqual({ flushed: 1200, retryAt: null });
      expect(outboxSize(sql)).toBe(0);
    });
    const app = appFor(runConfig(uniqueHost("script"), { agentId }));
    const lines = await auditLines(app, agentId);
    expect(lines.map((e) => e.seq)).toEqual(Array.from({ length: 1200 }, (_, i) => i + 1));
    const verify = await call(app, "GET", `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    expect(verify.body).toEqual({ ok: true, segments: 3, events: 1200, streams: 1 });
  });
});

describe("tamper evidence (hash chain per stream and day)", () => {
  async function threeSegments(agentId: string) {
    const stub = env.SESSIONS.getByName(`agent:${agentId}:http:r:dm:u`);
    await describeSession(stub);
    return runInDurableObject(stub, async (_i, state: DurableObjectState) => {
      const sql = createSql(state.storage.sql);
      const stream = state.id.toString();
      for (let n = 0; n < 3; n++) {
        enqueueAudit(sql, { ...event(n + 1), agent_id: agentId });
        await flushAudit({ sql, storage: state.storage, bucket: env.AUDIT, stream, agentId, now: () => 20_000 + n });
      }
      return (await env.AUDIT.list({ prefix: auditPrefix(agentId, today()) })).objects.map((o) => o.key);
    });
  }
  const verify = async (agentId: string) =>
    (
      await call(
        appFor(runConfig(uniqueHost("script"), { agentId })),
        "GET",
        `/api/admin/audit/verify?agent_id=${agentId}&date=${today()}`,
        undefined,
        ADMIN,
      )
    ).body;

  it("verify passes on an intact day", async () => {
    const agentId = `chain-${crypto.randomUUID().slice(0, 8)}`;
    await threeSegments(agentId);
    expect(await verify(agentId)).toEqual({ ok: true, segments: 3, events: 3, streams: 1 });
  });

  it("an edited segment breaks the link after it", async () => {
    const agentId = `chain-${crypto.randomUUID().slice(0, 8)}`;
    const keys = await threeSegments(agentId);
    const body = await (await env.AUDIT.get(keys[0] as string))?.text();
    await env.AUDIT.put(keys[0] as string, (body as string).replace('"actor":"system"', '"actor":"mallory"'));
    expect(await verify(agentId)).toMatchObject({
      ok: false,
      first_problem: { key: keys[1], problem: "prev_sha256 does not match the previous segment: edited, removed or re-ordered" },
    });
  });

  it("a deleted segment in the middle, and a deleted last segment, are both found", async () => {
    const agentId = `chain-${crypto.randomUUID().slice(0, 8)}`;
    const keys = await threeSegments(agentId);
    await env.AUDIT.delete(keys[1] as string);
    expect((await verify(agentId)).first_problem.problem).toBe("segment 2 of this stream is missing (found 3)");
    const other = `chain-${crypto.randomUUID().slice(0, 8)}`;
    const otherKeys = await threeSegments(other);
    await env.AUDIT.delete(otherKeys[2] as string);
    expect((await verify(other)).first_problem.problem).toBe(
      "the stream wrote 3 segment(s) but 2 chain up to it: the tail is missing or altered",
    );
  });

  it("verifySegments flags a segment whose events do not match its header", async () => {
    const stream = "a".repeat(64);
    const body = segmentBody({ stream, counter: 1, prev_sha256: GENESIS, events: 2 }, [event(1)]);
    const r = await verifySegments([{ key: segmentKey("a", today(), 1, stream, 1), body }]);
    expect(r).toMatchObject({ ok: false, first: { problem: "the events do not match the header or are not valid audit events" } });
  });
  it("ISSUE23 a segment written after the stream's head was read is no break; a removed tail and an altered head still are", async () => {
    const stream = "b".repeat(64);
    const bodies: string[] = [];
    let prev = GENESIS;
    for (let counter = 1; counter <= 3; counter++) {
      const body = segmentBody({ stream, counter, prev_sha256: prev, events: 1 }, [event(counter)]);
      bodies.push(body);
      prev = await segmentSha256(body);
    }
    const segments = bodies.map((body, i) => ({ key: segmentKey("a", today(), 1000 + i, stream, i + 1), body }));
    const sha = (i: number) => segmentSha256(bodies[i] as string);
    // The head was read when 2 segments existed; the third landed before the listing (a flush during verify).
    expect(await verifySegments(segments, new Map([[stream, { counter: 2, sha256: await sha(1) }]]))).toEqual({
      ok: true,
      segments: 3,
      events: 3,
      streams: 1,
    });
    // Read before the day's first flush (counter 0): everything listed came after it.
    expect(await verifySegments(segments, new Map([[stream, { counter: 0, sha256: GENESIS }]]))).toMatchObject({ ok: true });
    // The head counts 3 but only 2 are listed: the tail was removed.
    expect(await verifySegments(segments.slice(0, 2), new Map([[stream, { counter: 3, sha256: await sha(2) }]]))).toMatchObject({
      ok: false,
      first: { problem: "the stream wrote 3 segment(s) but 2 chain up to it: the tail is missing or altered" },
    });
    // The head's segment is not the one listed under its number.
    expect(await verifySegments(segments, new Map([[stream, { counter: 2, sha256: await sha(2) }]]))).toMatchObject({ ok: false });
  });
});

describe("run bundles (DESIGN §4, S3 §5 artifact_path)", () => {
  it("a finished run's bundle is one object at artifact_path/bundle.jsonl: run, manifests, events, trace, tool envelopes, in that order", async () => {
    const host = uniqueHost("script");
    const agentId = `bun-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [{ tool_calls: [{ id: "e1", name: "test__echo", arguments: '{"text":"x"}' }] }, { content: "bundled" }]);
    const app = appFor(runConfig(host, { agentId }));
    const id = await startRun(app, "bundle me", agentId);
    const run = await waitForRun(app, id);
    await until(async () => (await env.AUDIT.list({ prefix: `${run.artifact_path}/` })).objects.length === 1);
    const keys = (await env.AUDIT.list({ prefix: `${run.artifact_path}/` })).objects.map((o) => o.key.slice(run.artifact_path.length + 1));
    expect(keys).toEqual([BUNDLE_OBJECT]);
    expect(BUNDLE_OBJECT).toBe("bundle.jsonl");
    const object = await env.AUDIT.get(`${run.artifact_path}/bundle.jsonl`);
    expect(object?.httpMetadata?.contentType).toBe("application/x-ndjson");
    const text = (await object?.text()) ?? "";
    const parts = text
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l).part as BundlePart);
    // Parts in their fixed order, each line {part, data}.
    expect(parts).toEqual([...parts].sort((x, y) => BUNDLE_PARTS.indexOf(x) - BUNDLE_PARTS.indexOf(y)));
    expect(parts[0]).toBe("run");
    const bundle = parseBundle(text);
    expect(bundle.run).toHaveLength(1);
    expect(bundle.run[0]).toMatchObject({ id, status: "completed", output: "bundled", tool_calls: 1 });
    expect(bundle.manifest).toHaveLength(2); // two model calls
    expect(bundle.event.map((e) => (e as { event_type: string }).event_type).at(-1)).toBe("run.completed");
    expect(bundle.event.map((e) => (e as { seq: number }).seq)).toEqual(bundle.event.map((_, i) => i + 1));
    expect(bundle.trace.length).toBeGreaterThan(0);
    expect(bundle.tool).toHaveLength(1);
    expect((bundle.tool[0] as { response: unknown }).response).toMatchObject({
      tool: "test.echo",
      ok: true,
      output: { echoed: { text: "x" } },
    });
  });
});

describe('logs on R2 (S1 §4, DESIGN "Logging")', () => {
  it("a run's log lines land in logs/gateway/ and its model calls also in logs/{providerId}/ — hashes, no text", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "logged" }]);
    const app = appFor(runConfig(host));
    const id = await startRun(app, "a message whose text must not be logged");
    await waitForRun(app, id);
    const linesUnder = async (prefix: string) => {
      const lines: string[] = [];
      for (const o of (await env.AUDIT.list({ prefix })).objects)
        lines.push(...((await (await env.AUDIT.get(o.key))?.text()) ?? "").split("\n"));
      return lines.filter((l) => l.includes(id));
    };
    // The SessionDO flushes at most every OBJECT_FLUSH_INTERVAL_MS (2 s): the lines arrive within that.
    // Issue 23: one line per turn (run.turn) where prompt.assembled, model.call and run.finished were three.
    await until(async () => (await linesUnder("logs/moonshot/")).length > 0 && (await linesUnder("logs/gateway/")).length === 1);
    const gateway = await linesUnder("logs/gateway/");
    expect(gateway.map((l) => JSON.parse(l).event).sort()).toEqual(["run.turn"]);
    const call = JSON.parse((await linesUnder("logs/moonshot/"))[0] as string);
    expect(call).toMatchObject({ event: "run.turn", provider: "moonshot", model: "kimi-k1-128k", call: "ok", status: "completed" });
    expect(call.stack_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(gateway.join("\n")).not.toContain("must not be logged");
  });

  /** The gateway log lines of run `id`, parsed (the SessionDO flushes them within OBJECT_FLUSH_INTERVAL_MS). */
  async function gatewayLines(id: string, events: number): Promise<Record<string, any>[]> {
    const read = async () => {
      const lines: string[] = [];
      for (const o of (await env.AUDIT.list({ prefix: "logs/gateway/" })).objects)
        lines.push(...((await (await env.AUDIT.get(o.key))?.text()) ?? "").split("\n"));
      return lines.filter((l) => l.includes(id)).map((l) => JSON.parse(l) as Record<string, any>);
    };
    await until(async () => (await read()).length >= events);
    return read();
  }

  it("S1 §4.1 D-067 a tool call's gate outcome rides on the run's next line: run.round, then run.turn with `gates` equal to the decision kept on the call — no line per call", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ tool_calls: [{ id: "g1", name: "test__echo", arguments: '{"text":"hi"}' }] }, { content: "echoed" }]);
    const app = appFor(runConfig(host, { agent: { tools: { allow: ["test.echo"] } } }));
    const id = await startRun(app, "echo hi");
    expect(await waitForRun(app, id)).toMatchObject({ status: "completed", tool_calls: 1 });
    const lines = await gatewayLines(id, 2);
    expect(lines.map((l) => l.event)).toEqual(["run.round", "run.turn"]);
    const decision = (await runDetail(app, id)).events.find((e: { event_type: string }) => e.event_type === "tool.result").payload.gate;
    expect(lines[1]?.gates).toEqual([
      { tool: "test.echo", channel: decision.channel, risk: "read_only", policy_id: decision.policy_id, outcome: "allowed" },
    ]);
    expect(decision).toMatchObject({ tool: "test.echo", risk: "read_only", outcome: "allowed" });
    expect(lines[0]?.gates).toBeUndefined(); // nothing was gated before the first model round
  });

  it("S1 §4.1 D-067 a run that pauses for an approval writes the decisions it gathered as one tool.gate line", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ tool_calls: [{ id: "s1", name: "test__send", arguments: "{}" }] }, { content: "sent" }]);
    const app = appFor(runConfig(host, { agent: { tools: { allow: ["test.send"] } } }));
    const id = await startRun(app, "send it");
    await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
    const lines = await gatewayLines(id, 2);
    expect(lines.map((l) => l.event)).toEqual(["run.round", "tool.gate"]);
    expect(lines[1]).toMatchObject({ run_id: id, gates: [{ tool: "test.send", risk: "side_effect", outcome: "requires_approval" }] });
    expect(lines[1]?.gates).toHaveLength(1);
  });
});

/**
 * Issue 23 "No repeated work per turn", D-055: the run spec and the approvals-backlog count are cached per
 * isolate with honest invalidation. The spec follows the configuration in force (a new version is a new spec);
 * the backlog count is asked of D1 only when the isolate's copy could err the wrong way, and the pending limit
 * itself is never exceeded. Exact counts of D1 reads, with an injected clock; no timers.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { bundledConfig } from "../../src/config/load";
import { configInForce, forgetConfigInForce, postConfigVersion } from "../../src/config/versions";
import { GatewayError } from "../../src/errors";
import { reserveApprovalSlot } from "../../src/runs/approvals";
import { BACKLOG_CACHE_MS, forgetBacklog } from "../../src/runs/backlog";
import { buildRunSpec, cachedRunSpec } from "../../src/runs/spec";
import { refuseWhenApprovalsBacklogged } from "../../src/runs/submit";
import { ADMIN_REFRESH_MS, forgetAdminGenerations } from "../../src/storage/admin-generation";
import { runConfig, uniqueHost } from "../support/config";

afterEach(async () => {
  await env.DB.prepare("DELETE FROM config_versions").run();
  forgetAdminGenerations();
  forgetConfigInForce();
  forgetBacklog();
});

/** D1 with a count of the statements prepared on it. */
function countingDb(): { db: D1Database; reads: () => number } {
  let n = 0;
  const db = new Proxy(env.DB, {
    get(target, prop) {
      if (prop === "prepare")
        return (q: string) => {
          n++;
          return target.prepare(q);
        };
      const v = Reflect.get(target, prop, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { db, reads: () => n };
}

/** One early check: "ok" or the refusal's message. */
async function check(db: D1Database, agent: string, caller: string, limits: [agent: number, caller: number], now: number) {
  try {
    await refuseWhenApprovalsBacklogged(db, agent, limits[0], { key: caller, maxPending: limits[1] }, now);
    return "ok";
  } catch (err) {
    if (err instanceof GatewayError && err.code === "rate.limited") return "429";
    throw err;
  }
}

/** Indexes a pending approval the way a run does (one atomic statement): true if it fit under the limits. */
async function approvalAsked(agent: string, caller: string, limits: { perAgent: number; perCaller: number }, now: number) {
  const id = crypto.randomUUID();
  const slot = await reserveApprovalSlot(
    env.DB,
    {
      approval_id: `apr_${id}`,
      agent_id: agent,
      run_id: `run_${id}`,
      session_key: "agent:x:http:a:dm:u",
      tool: "test.send",
      created_at: new Date(now).toISOString(),
      expires_at: new Date(now + 3_600_000).toISOString(),
      caller,
    },
    limits,
    new Date(now),
  );
  return slot.ok;
}

const pendingInD1 = async (agent: string) =>
  (
    await env.DB.prepare("SELECT COUNT(*) AS n FROM approvals WHERE agent_id = ?1 AND status = 'pending'")
      .bind(agent)
      .first<{ n: number }>()
  )?.n ?? 0;

describe("ISSUE23 run spec cached per isolate", () => {
  it("ISSUE23 the same configuration, agent and channel give the one spec, built once and frozen, equal to buildRunSpec's", () => {
    const config = runConfig(uniqueHost("ok"));
    const a = cachedRunSpec(config, "main", "http");
    expect(cachedRunSpec(config, "main", "http")).toBe(a);
    expect(a).toEqual(buildRunSpec(config, "main", "http"));
    expect(Object.isFrozen(a) && Object.isFrozen(a.policy) && Object.isFrozen(a.tools)).toBe(true);
    expect(cachedRunSpec(config, "main", "openai")).not.toBe(a);
    expect(cachedRunSpec(config, "main", "openai").channel).toBe("openai");
    const ref = { source: "admin" as const, version: 3, sha256: "f".repeat(64) };
    expect(cachedRunSpec(config, "main", "http", ref).config).toEqual(ref);
  });

  it("ISSUE23 a new configuration version in force gets its own spec once the isolate sees it (within ADMIN_REFRESH_MS)", async () => {
    const t0 = Date.now();
    const first = await configInForce(env.DB, t0);
    const before = cachedRunSpec(first.config, "main", "http", first);
    const doc = JSON.parse(JSON.stringify(bundledConfig()));
    doc.runs.maxToolRounds = 3;
    const posted = await postConfigVersion(env.DB, doc, { actor: "test", now: new Date() });
    expect(posted.ok).toBe(true);
    // Before ADMIN_REFRESH_MS has passed this isolate still runs the version it read, and so do its specs.
    const same = await configInForce(env.DB, t0 + 1);
    expect(cachedRunSpec(same.config, "main", "http", same)).toBe(before);
    // Once it has, the new version is in force and its spec is new.
    const next = await configInForce(env.DB, t0 + ADMIN_REFRESH_MS);
    const after = cachedRunSpec(next.config, "main", "http", next);
    expect(after).not.toBe(before);
    expect(after.maxToolRounds).toBe(3);
    expect(after.config?.version).toBe(next.version);
    expect(before.maxToolRounds).toBe(bundledConfig().runs.maxToolRounds);
  });
});

describe("ISSUE23 approvals-backlog count cached per isolate (S1 §3.3 pending limit)", () => {
  it("ISSUE23 under the limit, D1 is read again only once the admitted runs could have filled it", async () => {
    const { db, reads } = countingDb();
    const agent = `bk-${crypto.randomUUID().slice(0, 8)}`;
    const t = Date.now();
    const answers = [];
    for (let i = 0; i < 7; i++) answers.push(await check(db, agent, "api:alice", [20, 3], t + i));
    expect(answers).toEqual(["ok", "ok", "ok", "ok", "ok", "ok", "ok"]);
    // Read at turns 1, 4 and 7: each read serves while 0 pending + runs admitted since stays under 3.
    expect(reads()).toBe(3);
  });

  it("ISSUE23 a count is used for at most BACKLOG_CACHE_MS", async () => {
    const { db, reads } = countingDb();
    const agent = `bk-${crypto.randomUUID().slice(0, 8)}`;
    const t = Date.now();
    expect(await check(db, agent, "api:alice", [20, 5], t)).toBe("ok");
    expect(await check(db, agent, "api:alice", [20, 5], t + BACKLOG_CACHE_MS - 1)).toBe("ok");
    expect(reads()).toBe(1);
    expect(await check(db, agent, "api:alice", [20, 5], t + BACKLOG_CACHE_MS)).toBe("ok");
    expect(reads()).toBe(2);
  });

  it("ISSUE23 at the limit the cached count refuses without D1 for at most BACKLOG_CACHE_MS; a decision through this isolate is seen at once", async () => {
    const { db, reads } = countingDb();
    const agent = `bk-${crypto.randomUUID().slice(0, 8)}`;
    const t = Date.now();
    for (let i = 0; i < 2; i++) expect(await approvalAsked(agent, "api:alice", { perAgent: 20, perCaller: 2 }, t)).toBe(true);
    expect(await check(db, agent, "api:alice", [20, 2], t)).toBe("429");
    expect(await check(db, agent, "api:alice", [20, 2], t + 1)).toBe("429");
    expect(reads()).toBe(1);
    // An admin decides one elsewhere: this isolate keeps refusing until its copy expires (the documented bound)...
    await env.DB.prepare(
      "UPDATE approvals SET status = 'approved' WHERE agent_id = ?1 AND rowid = (SELECT MIN(rowid) FROM approvals WHERE agent_id = ?1)",
    )
      .bind(agent)
      .run();
    expect(await check(db, agent, "api:alice", [20, 2], t + BACKLOG_CACHE_MS - 1)).toBe("429");
    expect(await check(db, agent, "api:alice", [20, 2], t + BACKLOG_CACHE_MS)).toBe("ok");
    expect(reads()).toBe(2);
    // ...and a decision made through this isolate (the admin route calls forgetBacklog) is seen by the next turn.
    expect(await check(db, agent, "api:alice", [20, 1], t + BACKLOG_CACHE_MS + 1)).toBe("429"); // 1 pending, from the copy
    expect(reads()).toBe(2);
    forgetBacklog();
    await env.DB.prepare("UPDATE approvals SET status = 'denied' WHERE agent_id = ?1").bind(agent).run();
    expect(await check(db, agent, "api:alice", [20, 1], t + BACKLOG_CACHE_MS + 2)).toBe("ok");
    expect(reads()).toBe(3);
  });

  it("ISSUE23 approvals asked elsewhere while this isolate admits from its copy never take the pending count past the limit", async () => {
    const { db } = countingDb();
    const agent = `bk-${crypto.randomUUID().slice(0, 8)}`;
    const limits = { perAgent: 2, perCaller: 2 };
    const t = Date.now();
    expect(await check(db, agent, "api:alice", [2, 2], t)).toBe("ok"); // reads 0 pending
    // Other isolates' runs fill the backlog: this isolate's copy does not know.
    expect(await approvalAsked(agent, "api:bob", limits, t)).toBe(true);
    expect(await approvalAsked(agent, "api:bob", limits, t)).toBe(true);
    // Within the window the early answer may still admit alice once (0 pending + 1 admitted < 2) — the staleness bound —
    expect(await check(db, agent, "api:alice", [2, 2], t + 1)).toBe("ok");
    // but the run it admitted is refused when it asks for its approval: the limit holds exactly.
    expect(await approvalAsked(agent, "api:alice", limits, t + 1)).toBe(false);
    expect(await pendingInD1(agent)).toBe(2);
    // And the next early check goes back to D1 (0 + 2 admitted reached the limit) and refuses.
    expect(await check(db, agent, "api:alice", [2, 2], t + 2)).toBe("429");
  });
});

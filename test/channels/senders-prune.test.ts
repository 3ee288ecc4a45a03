/**
 * Issue 24 §3, D-083: `channel_senders` is pruned by the cron tick — a refused sender's row 30 days after its last
 * refusal, never a paired sender's row (it is the sender's permission) nor one whose answer claim is inside its
 * window, at most SENDER_PRUNE_LIMIT rows per tick, oldest first. Rows written straight to the local D1 with chosen
 * ages, and end to end through Telegram (a refusal counted, pruned, counted afresh; a paired sender still runs) and
 * `GET /api/admin/channels/senders`.
 */
import { createScheduledController, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { pruneExpiredButtons } from "../../src/channels/approval-button-store";
import { SENDER_PRUNE_LIMIT, SENDER_RETENTION_MS } from "../../src/channels/sender-store";
import { createLogger } from "../../src/observability/logger";
import { runSchedulerTick } from "../../src/scheduler/tick";
import { runConfig, uniqueHost } from "../support/config";
import type { PlatformPost } from "../support/outbound";
import { ADMIN, appFor, call, until } from "../support/runs";

const DAY = 86_400_000;
const BOT_ID = "7000000001"; // TELEGRAM_BOT_TOKEN's numeric id (vitest.config.ts)
const TG = { "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string };
const CONFIG = runConfig("ok-prune.provider.test", { agent: { tools: { allow: [] } } });
const quiet = createLogger("error");
const numericId = () => 100_000_000 + Math.floor(Math.random() * 800_000_000);
const iso = (ms: number) => new Date(ms).toISOString();
let updateSeq = Math.floor(Math.random() * 1e9);

const tick = (at: number) =>
  runSchedulerTick(env, createScheduledController({ scheduledTime: new Date(at), cron: "* * * * *" }), quiet, { config: CONFIG });

/** A row as the refusal upsert (and the approval) write it, with chosen times. */
function row(agent: string, sender: string, o: { refusedAt: number; repliedAt?: number | null; pairedAt?: number; refused?: number }) {
  return env.DB.prepare(
    `INSERT INTO channel_senders (agent_id, channel, sender, refused, last_refused_at, replied_at, reply_claim, paired_at)
     VALUES (?1, 'telegram', ?2, ?3, ?4, ?5, ?6, ?7)`,
  ).bind(
    agent,
    sender,
    o.refused ?? 2,
    iso(o.refusedAt),
    o.repliedAt === undefined ? o.refusedAt : o.repliedAt,
    o.repliedAt === null ? null : "claim",
    o.pairedAt === undefined ? null : iso(o.pairedAt),
  );
}

async function sendersOf(agent: string): Promise<string[]> {
  const { results } = await env.DB.prepare("SELECT sender FROM channel_senders WHERE agent_id = ?1 ORDER BY sender")
    .bind(agent)
    .all<{ sender: string }>();
  return results.map((r) => r.sender);
}

function telegramApp(senders: { mode: "allowlist" | "pairing"; allow?: string[] }, host: string) {
  return appFor(
    runConfig(uniqueHost("ok"), {
      agent: { tools: { allow: [] } },
      channels: { telegram: { enabled: true, apiBaseUrl: `https://${host}`, senders } },
    }),
  );
}
const telegram = (fromId: number) =>
  JSON.stringify({
    update_id: ++updateSeq,
    message: {
      message_id: 55,
      date: 1_700_000_000,
      chat: { id: fromId, type: "private" },
      from: { id: fromId, is_bot: false },
      text: "hi",
    },
  });
const postTelegram = (app: ReturnType<typeof appFor>, fromId: number) =>
  app.request(
    "https://gateway.test/webhooks/telegram/main",
    { method: "POST", headers: { "Content-Type": "application/json", ...TG }, body: telegram(fromId) },
    env,
  );
async function adminSenders(app: ReturnType<typeof appFor>, agent = "main") {
  const res = await call(app, "GET", `/api/admin/channels/senders?agent_id=${agent}&limit=500`, undefined, ADMIN);
  expect(res.status).toBe(200);
  return res.body.senders as { sender: string; refused: number; last_refused_at: string | null; paired_at: string | null }[];
}

describe("ISSUE24-3 pruning channel_senders (D-083)", () => {
  it("ISSUE24-3 prune: a refused row 30 days past its last refusal goes; a recent one, one at the cutoff, a paired one and one inside its answer window stay; the admin list after", async () => {
    const agent = `prune-${crypto.randomUUID().slice(0, 8)}`;
    const now = Date.now();
    await env.DB.batch([
      row(agent, "old", { refusedAt: now - SENDER_RETENTION_MS - 1 }),
      row(agent, "old-never-answered", { refusedAt: now - 90 * DAY, repliedAt: null }),
      row(agent, "at-cutoff", { refusedAt: now - SENDER_RETENTION_MS }),
      row(agent, "recent", { refusedAt: now - 29 * DAY }),
      row(agent, "paired", { refusedAt: now - 400 * DAY, pairedAt: now - 399 * DAY, refused: 7 }),
      // Not written by the code today (an answer is claimed in the refusal that moves last_refused_at), but the guard
      // holds if the window ever outgrows the retention: an answer claim inside its window keeps the row.
      row(agent, "claim-in-window", { refusedAt: now - 31 * DAY, repliedAt: now - 60_000 }),
    ]);
    const report = await tick(now);
    expect(report.sendersPruned).toBe(2);
    expect(await sendersOf(agent)).toEqual(["at-cutoff", "claim-in-window", "paired", "recent"]);
    // A second tick at the same time finds nothing more.
    expect((await tick(now)).sendersPruned).toBe(0);

    const app = appFor(CONFIG);
    expect(await adminSenders(app, agent)).toEqual([
      { agent_id: agent, channel: "telegram", sender: "recent", refused: 2, last_refused_at: iso(now - 29 * DAY), paired_at: null },
      {
        agent_id: agent,
        channel: "telegram",
        sender: "at-cutoff",
        refused: 2,
        last_refused_at: iso(now - SENDER_RETENTION_MS),
        paired_at: null,
      },
      {
        agent_id: agent,
        channel: "telegram",
        sender: "claim-in-window",
        refused: 2,
        last_refused_at: iso(now - 31 * DAY),
        paired_at: null,
      },
      {
        agent_id: agent,
        channel: "telegram",
        sender: "paired",
        refused: 7,
        last_refused_at: iso(now - 400 * DAY),
        paired_at: iso(now - 399 * DAY),
      },
    ]);
    // D1 is shared by the tests of this file: the next test's exact counts must not see these rows age.
    await env.DB.prepare("DELETE FROM channel_senders WHERE agent_id = ?1").bind(agent).run();
  });

  it("ISSUE24-3 prune: at most SENDER_PRUNE_LIMIT rows per tick, oldest first — a backlog of LIMIT + 7 goes in two ticks; recent rows stay", async () => {
    expect(SENDER_PRUNE_LIMIT).toBe(1_000);
    const agent = `bulk-${crypto.randomUUID().slice(0, 8)}`;
    const now = Date.now();
    const base = now - 100 * DAY;
    // LIMIT + 7 old rows, one second apart (sender s0000 the oldest), and 2 recent ones.
    await env.DB.prepare(
      `WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?2 - 1)
       INSERT INTO channel_senders (agent_id, channel, sender, refused, last_refused_at, replied_at, reply_claim)
       SELECT ?1, 'slack', printf('s%04d', i), 1, strftime('%Y-%m-%dT%H:%M:%fZ', (?3 + i * 1000) / 1000.0, 'unixepoch'), ?3 + i * 1000, 'c'
       FROM n`,
    )
      .bind(agent, SENDER_PRUNE_LIMIT + 7, base)
      .run();
    await env.DB.batch([row(agent, "new-1", { refusedAt: now - DAY }), row(agent, "new-2", { refusedAt: now - 2 * DAY })]);
    expect((await sendersOf(agent)).length).toBe(SENDER_PRUNE_LIMIT + 9);

    expect((await tick(now)).sendersPruned).toBe(SENDER_PRUNE_LIMIT);
    expect(await sendersOf(agent)).toEqual(["new-1", "new-2", "s1000", "s1001", "s1002", "s1003", "s1004", "s1005", "s1006"]);
    expect((await tick(now + 60_000)).sendersPruned).toBe(7);
    expect(await sendersOf(agent)).toEqual(["new-1", "new-2"]);
    expect((await tick(now + 120_000)).sendersPruned).toBe(0);
  });

  it("ISSUE24-3 prune: each pass reads through the partial index of refused rows, not the whole table", async () => {
    const { results } = await env.DB.prepare(
      `EXPLAIN QUERY PLAN SELECT rowid FROM channel_senders
       WHERE paired_at IS NULL AND last_refused_at < ?1 AND (replied_at IS NULL OR replied_at <= ?2) ORDER BY last_refused_at LIMIT ?3`,
    )
      .bind("2026-01-01T00:00:00.000Z", 0, 10)
      .all<{ detail: string }>();
    expect(results.map((r) => r.detail)).toEqual(["SEARCH channel_senders USING INDEX channel_senders_refused (last_refused_at<?)"]);
  });

  it("ISSUE24-3 prune: a failing prune is logged (the error's name only) and the tick still completes and writes its line", async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("info", (line) => lines.push(JSON.parse(line)));
    const failingDb = new Proxy(env.DB, {
      get(target, prop) {
        if (prop !== "prepare") return Reflect.get(target, prop).bind(target);
        return (sql: string) => {
          if (sql.includes("DELETE FROM channel_senders")) throw new Error("D1_ERROR: injected");
          return target.prepare(sql);
        };
      },
    });
    const at = Date.now();
    const report = await runSchedulerTick(
      { DB: failingDb, SESSIONS: env.SESSIONS },
      createScheduledController({ scheduledTime: new Date(at), cron: "* * * * *" }),
      logger,
      { config: CONFIG, dispatch: async () => ({ ok: false, skip: true, error: "unused" }) },
    );
    expect(report).toMatchObject({ sendersPruned: 0, failed: 0, deferred: 0 });
    expect(lines.filter((l) => l.event === "scheduler.senders_prune").map(({ ts: _, ...l }) => l)).toEqual([
      { level: "warn", event: "scheduler.senders_prune", error_name: "Error" },
    ]);
    expect(lines.filter((l) => l.event === "scheduler.tick").map((l) => l.senders_pruned)).toEqual([0]);
  });

  it("ISSUE24-3 prune end to end: a Telegram refusal is counted, pruned after 30 days (gone from the admin list), then counted afresh", async () => {
    const host = `ok-${crypto.randomUUID().slice(0, 8)}.telegram.test`;
    const stranger = numericId();
    const app = telegramApp({ mode: "allowlist", allow: [] }, host);
    for (let i = 0; i < 3; i++) expect((await postTelegram(app, stranger)).status).toBe(200);
    const mine = async () => (await adminSenders(app)).filter((s) => s.sender === String(stranger));
    const [counted] = await mine();
    expect(counted).toMatchObject({ sender: String(stranger), refused: 3, paired_at: null });
    const refusedAt = Date.parse(counted?.last_refused_at ?? "");

    // A minute short of the retention: kept. Past it: pruned, and the admin list no longer shows it.
    await tick(refusedAt + SENDER_RETENTION_MS - 60_000);
    expect((await mine()).length).toBe(1);
    await tick(refusedAt + SENDER_RETENTION_MS + 60_000);
    expect(await mine()).toEqual([]);

    expect((await postTelegram(app, stranger)).status).toBe(200);
    expect(await mine()).toEqual([
      { agent_id: "main", channel: "telegram", sender: String(stranger), refused: 1, last_refused_at: expect.any(String), paired_at: null },
    ]);
  });

  it("ISSUE24-3 prune end to end: a paired sender refused long ago keeps its row through the ticks and still runs", async () => {
    const host = `ok-${crypto.randomUUID().slice(0, 8)}.telegram.test`;
    const fromId = numericId();
    const app = telegramApp({ mode: "pairing" }, host);
    const now = Date.now();
    await row("main", String(fromId), { refusedAt: now - 200 * DAY, pairedAt: now - 199 * DAY, refused: 4 }).run();
    await tick(now);
    await tick(now + 365 * DAY);
    expect((await adminSenders(app)).filter((s) => s.sender === String(fromId))).toEqual([
      {
        agent_id: "main",
        channel: "telegram",
        sender: String(fromId),
        refused: 4,
        last_refused_at: iso(now - 200 * DAY),
        paired_at: iso(now - 199 * DAY),
      },
    ]);

    expect((await postTelegram(app, fromId)).status).toBe(200);
    await until(async () => ((await (await fetch(`https://mock.control/platform?host=${host}`)).json()) as PlatformPost[]).length === 1);
    const runs = await runInDurableObject(env.SESSIONS.getByName(`agent:main:telegram:${BOT_ID}:dm:${fromId}`), (_, state) =>
      state.storage.sql.exec("SELECT status FROM runs").toArray(),
    );
    expect(runs.length).toBe(1);
  });
});

describe("ISSUE24-2 the cron tick prunes chat approval buttons", () => {
  it("ISSUE24-2 buttons a week past their approval's expiry go (oldest first, at most the limit per tick); newer ones stay", async () => {
    const DAY = 86_400_000;
    const at = Date.now();
    const agent = `btn-${crypto.randomUUID().slice(0, 8)}`;
    const rows: [string, number][] = [
      ["old-1", at - 9 * DAY],
      ["old-2", at - 8 * DAY],
      ["recent", at - 6 * DAY],
      ["live", at + DAY],
    ];
    for (const [id, expires] of rows)
      await env.DB.prepare(
        "INSERT INTO approval_buttons (token_sha256, approval_id, agent_id, decision, channel, chat_id, created_at, expires_at) VALUES (?1, ?2, ?3, 'approve', 'telegram', '-1', ?4, ?4)",
      )
        .bind(`${agent}-${id}`, `apr_${id}`, agent, new Date(expires).toISOString())
        .run();
    const left = async () =>
      (
        await env.DB.prepare("SELECT token_sha256 FROM approval_buttons WHERE agent_id = ?1 ORDER BY token_sha256").bind(agent).all()
      ).results.map((r) => String(r.token_sha256).slice(agent.length + 1));
    expect(await pruneExpiredButtons(env.DB, new Date(at), 1)).toBe(1); // the limit: the oldest first
    expect(await left()).toEqual(["live", "old-2", "recent"]);
    await runSchedulerTick(
      { DB: env.DB, SESSIONS: env.SESSIONS },
      createScheduledController({ scheduledTime: new Date(at), cron: "* * * * *" }),
      createLogger("info", () => {}),
      { config: CONFIG, dispatch: async () => ({ ok: false, skip: true, error: "unused" }) },
    );
    expect(await left()).toEqual(["live", "recent"]);
  });
});

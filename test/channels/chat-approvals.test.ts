/**
 * Issue 24 §2 (D-075): approvals from inside the chat. A run from a Telegram or Slack conversation that waits for an
 * approval posts Approve / Deny buttons to its chat (through the reply outbox); a press by someone on the agent's
 * approver list decides it through the admin's own decision path, and the message is edited to the outcome. Forged,
 * altered, replayed, expired, wrong-chat and not-an-approver presses change nothing. Platforms are mocked at the
 * network boundary (test/support/outbound.ts).
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { mintButtonToken, parseButtonData } from "../../src/channels/approval-buttons";
import { parseGatewayConfig } from "../../src/config/parse";
import { runObjectId } from "../../src/runs/ids";
import { buildRunSpec } from "../../src/runs/spec";
import { mockProvider, runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { PlatformPost } from "../support/outbound";
import { ADMIN, type App, appFor, call, invocations, registerTestTools, runDetail, until } from "../support/runs";

registerTestTools();

const BOT_ID = "7000000001"; // TELEGRAM_BOT_TOKEN's numeric id (vitest.config.ts)
const APPROVER = 9001;
const OTHER_APPROVER = 9002;
const SLACK_APPROVER = "U0APPROVER";
const label = () => crypto.randomUUID().slice(0, 8);
const TG = { "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string };
type Ev = { event_type: string; payload: Record<string, unknown>; actor?: string };

interface Setup {
  app: App;
  tg: string;
  slack: string;
  provider: string;
}

/** An app whose `main` agent may use test.send (side_effect: needs approval), with approvers unless `approvers: null`. */
async function setup(
  o: {
    approvers?: Record<string, string[]> | null;
    tg?: string;
    args?: Record<string, unknown>;
    runs?: number;
    maxPendingPerCaller?: number;
  } = {},
): Promise<Setup> {
  const provider = uniqueHost("script");
  // `runs` runs that each ask once (their tool calls come first: each run pauses before any of them answers).
  const args = JSON.stringify(o.args ?? { to: "ops@example.com", text: "deploy now" });
  const ask = { tool_calls: [{ id: "send_1", name: "test__send", arguments: args }] };
  const n = o.runs ?? 1;
  await scriptProvider(provider, [...Array.from({ length: n }, () => ask), ...Array.from({ length: n }, () => ({ content: "sent it" }))]);
  const tg = o.tg ?? `ok-${label()}.telegram.test`;
  const slack = `ok-${label()}.slack.test`;
  const approvers =
    o.approvers === null
      ? {}
      : { approvers: o.approvers ?? { telegram: [String(APPROVER), String(OTHER_APPROVER)], slack: [SLACK_APPROVER] } };
  const config = runConfig(provider, {
    agent: { tools: { allow: ["test.send"] }, ...approvers },
    channels: {
      telegram: { enabled: true, apiBaseUrl: `https://${tg}` },
      slack: { enabled: true, apiBaseUrl: `https://${slack}/api` },
    },
  });
  // A second agent with the same approvers: a button of `main` pressed on `ops`'s webhook must not count.
  config.agents.ops = config.agents.main as (typeof config.agents)[string];
  if (o.maxPendingPerCaller) config.tools.policy.approvals.maxPendingPerCaller = o.maxPendingPerCaller;
  return { app: appFor(config), tg, slack, provider };
}

/**
 * The posts a Telegram press leads to, after the prompt (which comes first): the press's answer and edit, in that
 * order, and the resumed run's answer from the reply outbox — which may land before, between or after them.
 */
function afterPress(posts: PlatformPost[]): { answer: PlatformPost; edit: PlatformPost; reply: PlatformPost } {
  expect(posts[0]?.method).toBe("sendMessage");
  const rest = posts.slice(1);
  const press = rest.filter((p) => p.method !== "sendMessage");
  expect(press.map((p) => p.method)).toEqual(["answerCallbackQuery", "editMessageText"]);
  const replies = rest.filter((p) => p.method === "sendMessage");
  expect(replies).toHaveLength(1);
  return { answer: press[0] as PlatformPost, edit: press[1] as PlatformPost, reply: replies[0] as PlatformPost };
}

/** Waits for a channel's run to end (admin view: the run has no API caller); its S3 view. */
async function waitForRun(app: App, runId: string): Promise<{ status: string }> {
  let run: { status: string } = { status: "" };
  await until(async () => {
    run = (await runDetail(app, runId)).run;
    return ["completed", "failed", "cancelled"].includes(run.status);
  }, 15_000);
  return run;
}

const postsAt = async (host: string): Promise<PlatformPost[]> => (await fetch(`https://mock.control/platform?host=${host}`)).json();
const post = (app: App, path: string, body: string, headers: Record<string, string>) =>
  app.request(`https://gateway.test${path}`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body }, env);

async function runsOf(sessionKey: string): Promise<{ id: string; status: string }[]> {
  return runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
    state.storage.sql.exec("SELECT id, status FROM runs ORDER BY message_seq").toArray(),
  ) as never;
}

let updateSeq = Math.floor(Math.random() * 1e9);

/** A Telegram group whose member asked something that needs approval: the run, its approval and the prompt sent. */
interface Asked {
  chatId: number;
  asker: number;
  sessionKey: string;
  runId: string;
  approvalId: string;
  prompt: PlatformPost;
  approveData: string;
  denyData: string;
  messageId: number;
}

async function askInTelegram(s: Setup, from?: number): Promise<Asked> {
  const chatId = -1_000_000_000 - Math.floor(Math.random() * 1e8);
  // A sender of its own: the per-caller pending limit (5) counts each sender's waiting approvals.
  const asker = from ?? 10_000 + Math.floor(Math.random() * 1e8);
  const update = {
    update_id: ++updateSeq,
    message: {
      message_id: 77,
      date: 1_700_000_000,
      chat: { id: chatId, type: "group" },
      from: { id: asker, is_bot: false, first_name: "Bo" },
      text: "send it",
    },
  };
  expect((await post(s.app, "/webhooks/telegram/main", JSON.stringify(update), TG)).status).toBe(200);
  const key = `agent:main:telegram:${BOT_ID}:group:${chatId}`;
  await until(async () => (await runsOf(key))[0]?.status === "awaiting_approval");
  const runId = ((await runsOf(key))[0] as { id: string }).id;
  const approvalId = (await runDetail(s.app, runId)).events.find((e: Ev) => e.event_type === "approval.requested").payload
    .approval_id as string;
  const ours = (p: PlatformPost) => p.method === "sendMessage" && p.body.chat_id === String(chatId);
  await until(async () => (await postsAt(s.tg)).some(ours));
  const all = await postsAt(s.tg);
  const prompt = all.find(ours) as PlatformPost;
  const keyboard = (prompt.body.reply_markup as { inline_keyboard: { text: string; callback_data: string }[][] }).inline_keyboard;
  const [approve, deny] = keyboard[0] as { callback_data: string }[];
  const messageId = 1000 + all.findIndex(ours); // the mock's message_id: 1000 + the posts before it
  return {
    chatId,
    asker,
    sessionKey: key,
    runId,
    approvalId,
    prompt,
    approveData: approve?.callback_data as string,
    denyData: deny?.callback_data as string,
    messageId,
  };
}

/** A press of a button of the prompt, as Telegram delivers it. */
function press(a: Asked, data: string, o: { fromId?: number; updateId?: number; chatId?: number; username?: string } = {}) {
  return JSON.stringify({
    update_id: o.updateId ?? ++updateSeq,
    callback_query: {
      id: `cq${label()}`,
      from: { id: o.fromId ?? APPROVER, is_bot: false, first_name: "Ada", username: o.username ?? "ada" },
      message: { message_id: a.messageId, date: 1_700_000_001, chat: { id: o.chatId ?? a.chatId, type: "group" }, text: "Approval needed" },
      chat_instance: "1",
      data,
    },
  });
}

const pressTelegram = (s: Setup, a: Asked, data: string, o: Parameters<typeof press>[2] = {}) =>
  post(s.app, "/webhooks/telegram/main", press(a, data, o), TG);

const approvalOf = async (s: Setup, id: string) => (await call(s.app, "GET", `/api/admin/approvals/${id}`, undefined, ADMIN)).body;
const methods = async (host: string) => (await postsAt(host)).map((p) => p.method);
const decidedEvents = async (s: Setup, runId: string) =>
  (await runDetail(s.app, runId)).events.filter((e: Ev) => e.event_type === "approval.decided") as Ev[];

/** The session's audit events, queued or shipped, once one matches `done`. */
async function auditEvents(s: Setup, sessionKey: string, done: (events: Ev[]) => boolean): Promise<(Ev & { run_id?: string })[]> {
  const day = new Date().toISOString().slice(0, 10);
  let events: Ev[] = [];
  await until(async () => {
    const queued = await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
      state.storage.sql.exec("SELECT event FROM audit_outbox").toArray(),
    );
    const shipped = (await call(s.app, "GET", `/api/admin/audit?agent_id=main&date=${day}`, undefined, ADMIN)).text;
    events = [
      ...queued.map((r) => JSON.parse(r.event as string)),
      ...shipped
        .split("\n")
        .filter(Boolean)
        .map((l: string) => JSON.parse(l)),
    ];
    return done(events);
  });
  return events;
}

/** The refusals a presser saw (answerCallbackQuery alerts). */
const alerts = async (host: string) =>
  (await postsAt(host)).filter((p) => p.method === "answerCallbackQuery" && p.body.show_alert === true).map((p) => p.body.text as string);

describe("ISSUE24-2 Telegram: approving and denying from the chat", { timeout: 60_000 }, () => {
  it("ISSUE24-2 the prompt: one sendMessage in the chat, the tool and a guarded summary, two buttons whose callback_data fits 64 bytes", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    expect(a.prompt.body.chat_id).toBe(String(a.chatId));
    expect(a.prompt.body.reply_parameters).toEqual({ message_id: 77, allow_sending_without_reply: true });
    const text = a.prompt.body.text as string;
    expect(
      text.startsWith('Approval needed: the agent wants to run test.send\n\nto: "ops@example.com"\ntext: "deploy now"\n\nExpires '),
    ).toBe(true);
    expect(text).toContain(a.approvalId.slice(-6));
    for (const data of [a.approveData, a.denyData]) {
      expect(data).toMatch(/^apv1:[A-Za-z0-9_-]{22}$/);
      expect(new TextEncoder().encode(data).length).toBeLessThanOrEqual(64);
    }
    expect(a.approveData).not.toBe(a.denyData);
    // Only the hashes are stored: neither token is in D1.
    const stored = await env.DB.prepare("SELECT * FROM approval_buttons WHERE approval_id = ?1 ORDER BY decision").bind(a.approvalId).all();
    expect(stored.results.map((r) => [r.decision, r.channel, r.chat_id, r.used_at])).toEqual([
      ["approve", "telegram", String(a.chatId), null],
      ["deny", "telegram", String(a.chatId), null],
    ]);
    expect(JSON.stringify(stored.results)).not.toContain(a.approveData.slice(5));
    expect(await methods(s.tg)).toEqual(["sendMessage"]);
  });

  it("ISSUE24-2 approve → the run resumes and completes, exactly one answerCallbackQuery and one editMessageText, the approval says who decided and from where", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    const res = await pressTelegram(s, a, a.approveData);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
    const run = await waitForRun(s.app, a.runId);
    expect(run.status).toBe("completed");
    expect(invocations.filter((i) => i.runId === a.runId && i.tool === "test.send")).toHaveLength(1);
    await until(async () => (await methods(s.tg)).length === 4);
    const { answer, edit: edited, reply } = afterPress(await postsAt(s.tg));
    expect(answer.body).toMatchObject({ text: "Approved. The run continues.", show_alert: false });
    const edit = edited.body as Record<string, unknown>;
    expect(edit.chat_id).toBe(String(a.chatId));
    expect(edit.message_id).toBe(a.messageId);
    expect(edit.reply_markup).toBeUndefined(); // the keyboard goes
    expect((edit.text as string).endsWith("\n\n✅ Approved by telegram:9001 (@ada)")).toBe(true);
    expect(reply.body.text).toBe("sent it");

    const approval = await approvalOf(s, a.approvalId);
    expect(approval).toMatchObject({ status: "approved", decided_by: "telegram:9001", decided_via: "telegram", decision_reason: null });
    await until(async () => {
      const list = await call(s.app, "GET", "/api/admin/approvals?agent_id=main&limit=200", undefined, ADMIN);
      const row = list.body.approvals.find((x: { approval_id: string }) => x.approval_id === a.approvalId);
      return row?.decided_by === "telegram:9001" && row.decided_via === "telegram" && row.status === "approved";
    });
    const [decided] = await decidedEvents(s, a.runId);
    expect(decided?.payload).toEqual({
      approval_id: a.approvalId,
      decision: "approved",
      decided_by: "telegram:9001",
      decided_via: "telegram",
    });
    // The audit log has the decision with the chat user as its actor, and the prompt's delivery.
    const mine = (type: string) => (e: Ev) => e.event_type === type && e.payload.approval_id === a.approvalId;
    const audit = await auditEvents(
      s,
      a.sessionKey,
      (events) => events.some(mine("approval.decided")) && events.some(mine("approval.prompt.delivered")),
    );
    expect(audit.find(mine("approval.decided"))).toMatchObject({
      actor: "telegram:9001",
      payload: { approval_id: a.approvalId, decided_by: "telegram:9001", decided_via: "telegram" },
    });
    expect(audit.find(mine("approval.prompt.delivered"))).toMatchObject({
      run_id: a.runId,
      payload: { approval_id: a.approvalId, channel: "telegram", message_id: String(a.messageId) },
    });
  });

  it("ISSUE24-2 deny → the call is not run, the run completes, the message says who denied", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    expect((await pressTelegram(s, a, a.denyData, { fromId: OTHER_APPROVER, username: "bob" })).status).toBe(200);
    expect((await waitForRun(s.app, a.runId)).status).toBe("completed");
    expect(invocations.filter((i) => i.runId === a.runId)).toHaveLength(0);
    await until(async () => (await methods(s.tg)).length === 4);
    const { answer, edit } = afterPress(await postsAt(s.tg));
    expect(answer.body).toMatchObject({ text: "Denied. The call will not run." });
    expect(String(edit.body.text).endsWith("\n\n⛔ Denied by telegram:9002 (@bob)")).toBe(true);
    expect(await approvalOf(s, a.approvalId)).toMatchObject({ status: "denied", decided_by: "telegram:9002", decided_via: "telegram" });
    const result = (await runDetail(s.app, a.runId)).events.find((e: Ev) => e.event_type === "tool.result");
    expect(JSON.stringify(result?.payload)).toContain("denied by telegram:9002");
  });

  it("ISSUE24-2 the admin's decision still shows admin/admin, and a chat press afterwards changes nothing", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    const decided = await call(s.app, "POST", `/api/admin/approvals/${a.approvalId}`, { decision: "deny" }, ADMIN);
    expect(decided.body).toMatchObject({ status: "denied", decided_by: "admin", decided_via: "admin" });
    const [event] = await decidedEvents(s, a.runId);
    expect(event?.payload).toEqual({ approval_id: a.approvalId, decision: "denied", decided_by: "admin" });
    await pressTelegram(s, a, a.approveData);
    expect(await alerts(s.tg)).toEqual(["This approval was already denied by admin; nothing changed."]);
    expect(await approvalOf(s, a.approvalId)).toMatchObject({ status: "denied", decided_by: "admin" });
    // D-081: the message follows the admin's decision (one edit from the outbox; the refused press edits nothing).
    await until(async () => (await methods(s.tg)).includes("editMessageText"));
    expect((await postsAt(s.tg)).filter((p) => p.method === "editMessageText").map((p) => p.body.text)).toEqual([
      `${a.prompt.body.text}\n\n⛔ Denied by admin`,
    ]);
  });
});

describe("ISSUE24-2 the dashboard's decided list: a chat decision shows its decider (D-081)", { timeout: 60_000 }, () => {
  it("ISSUE24-2 GET /api/admin/approvals (what 'Decided recently' reads) lists a Telegram press as telegram:<id> via telegram, an admin's as admin", async () => {
    const s = await setup({ runs: 2 });
    const a = await askInTelegram(s);
    const b = await askInTelegram(s);
    expect((await pressTelegram(s, a, a.approveData)).status).toBe(200);
    expect((await call(s.app, "POST", `/api/admin/approvals/${b.approvalId}`, { decision: "deny" }, ADMIN)).status).toBe(200);
    type Listed = { approval_id: string; status: string; decided_by: string | null; decided_via: string | null };
    let listed: Listed[] = [];
    await until(async () => {
      const res = await call(s.app, "GET", "/api/admin/approvals?limit=200", undefined, ADMIN);
      listed = (res.body.approvals as Listed[]).filter((x) => x.approval_id === a.approvalId || x.approval_id === b.approvalId);
      return listed.length === 2 && listed.every((x) => x.status !== "pending");
    });
    const pick = ({ approval_id, status, decided_by, decided_via }: Listed) => ({ approval_id, status, decided_by, decided_via });
    expect(listed.map(pick).sort((x, y) => (x.status < y.status ? -1 : 1))).toEqual([
      { approval_id: a.approvalId, status: "approved", decided_by: "telegram:9001", decided_via: "telegram" },
      { approval_id: b.approvalId, status: "denied", decided_by: "admin", decided_via: "admin" },
    ]);
  });
});

describe("ISSUE24-2 Telegram: presses that change nothing", { timeout: 60_000 }, () => {
  it("ISSUE24-2 a second press (the other button, then the same one) is refused; a redelivered update is acknowledged and does nothing", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    const updateId = ++updateSeq;
    await pressTelegram(s, a, a.approveData, { updateId });
    await waitForRun(s.app, a.runId);
    // Telegram redelivers the same update: acknowledged, no second answer or edit.
    const again = await pressTelegram(s, a, a.approveData, { updateId });
    expect(await again.json()).toEqual({ ok: true, ignored: true });
    await pressTelegram(s, a, a.denyData, { fromId: OTHER_APPROVER });
    await pressTelegram(s, a, a.approveData);
    expect(await alerts(s.tg)).toEqual([
      "This approval was already decided (its buttons were used by telegram:9001); nothing changed.",
      "This approval was already decided (its buttons were used by telegram:9001); nothing changed.",
    ]);
    const posts = await postsAt(s.tg);
    expect(posts.filter((p) => p.method === "editMessageText")).toHaveLength(1);
    expect(await decidedEvents(s, a.runId)).toHaveLength(1);
    expect(await approvalOf(s, a.approvalId)).toMatchObject({ status: "approved", decided_by: "telegram:9001" });
  });

  it("ISSUE24-2 forged and altered tokens: a random token, one changed character, the approval id itself, another chat's button, a malformed payload — all refused, the approval still pending", async () => {
    const s = await setup({ runs: 2 });
    const a = await askInTelegram(s);
    const b = await askInTelegram(s); // a second approval, in another group, same agent
    const token = a.approveData.slice(5);
    const flipped = `apv1:${token.slice(0, 10)}${token[10] === "A" ? "B" : "A"}${token.slice(11)}`;
    const forged = [
      `apv1:${"A".repeat(22)}`,
      flipped,
      `apv1:${a.approvalId.slice(-22)}`,
      b.approveData, // another chat's (and another approval's) approve button pressed here
      `apv1:${token}x`,
      "apv1:",
    ];
    for (const data of forged) expect((await pressTelegram(s, a, data)).status).toBe(200);
    const invalid = "This button is not valid (not one this gateway issued for this chat); nothing changed.";
    expect(await alerts(s.tg)).toEqual(forged.map(() => invalid));
    for (const id of [a.approvalId, b.approvalId]) expect((await approvalOf(s, id)).status).toBe("pending");
    expect(await methods(s.tg)).not.toContain("editMessageText");
    // The right button of the right chat, delivered to another agent's webhook: bound to `main`, refused on `ops`.
    await post(s.app, "/webhooks/telegram/ops", press(a, a.approveData), TG);
    expect((await alerts(s.tg)).at(-1)).toBe(invalid);
    expect((await approvalOf(s, a.approvalId)).status).toBe("pending");
    // The real button still works afterwards: nothing was burned.
    await pressTelegram(s, a, a.approveData);
    expect((await waitForRun(s.app, a.runId)).status).toBe("completed");
  });

  it("ISSUE24-2 a presser not on the approver list changes nothing and is told so; the buttons stay usable", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    await pressTelegram(s, a, a.approveData, { fromId: a.asker }); // the member who asked, not an approver
    await pressTelegram(s, a, a.denyData, { fromId: 1 });
    expect(await alerts(s.tg)).toEqual([
      "You are not on this agent's approver list; nothing changed.",
      "You are not on this agent's approver list; nothing changed.",
    ]);
    expect((await approvalOf(s, a.approvalId)).status).toBe("pending");
    const unused = await env.DB.prepare("SELECT COUNT(*) AS n FROM approval_buttons WHERE approval_id = ?1 AND used_at IS NULL")
      .bind(a.approvalId)
      .first();
    expect(unused).toEqual({ n: 2 });
    await pressTelegram(s, a, a.denyData);
    expect((await waitForRun(s.app, a.runId)).status).toBe("completed");
    expect(await approvalOf(s, a.approvalId)).toMatchObject({ status: "denied", decided_by: "telegram:9001" });
  });

  it("ISSUE24-2 an expired approval: the press is refused, the approval is expired, never approved", async () => {
    const s = await setup({ runs: 2 });
    const a = await askInTelegram(s);
    const b = await askInTelegram(s);
    const past = new Date(Date.now() - 1000).toISOString();
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(a.runId) as string));
    await runInDurableObject(stub, (_i, state: DurableObjectState) => {
      state.storage.sql.exec("UPDATE approvals SET expires_at = ? WHERE id = ?", past, a.approvalId);
    });
    await pressTelegram(s, a, a.approveData);
    expect(await alerts(s.tg)).toEqual(["This approval has expired; nothing changed. The call was not run."]);
    expect((await approvalOf(s, a.approvalId)).status).toBe("expired");
    expect(invocations.filter((i) => i.runId === a.runId)).toHaveLength(0);
    // And once the button's own expiry has passed, the gateway refuses before reaching the session.
    await env.DB.prepare("UPDATE approval_buttons SET expires_at = ?1 WHERE approval_id = ?2").bind(past, b.approvalId).run();
    await pressTelegram(s, b, b.denyData);
    expect((await alerts(s.tg)).at(-1)).toBe("This approval has expired; nothing changed. The call was not run.");
  });

  it("ISSUE24-2 concurrent approve and deny by two approvers: exactly one wins, the other changes nothing", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    const answers = await Promise.all([
      pressTelegram(s, a, a.approveData, { fromId: APPROVER }),
      pressTelegram(s, a, a.denyData, { fromId: OTHER_APPROVER }),
    ]);
    expect(answers.map((r) => r.status)).toEqual([200, 200]);
    await waitForRun(s.app, a.runId);
    const approval = await approvalOf(s, a.approvalId);
    expect(["approved", "denied"]).toContain(approval.status);
    expect(await decidedEvents(s, a.runId)).toHaveLength(1);
    const posts = await postsAt(s.tg);
    expect(posts.filter((p) => p.method === "editMessageText")).toHaveLength(1);
    expect(await alerts(s.tg)).toHaveLength(1);
    expect(invocations.filter((i) => i.runId === a.runId)).toHaveLength(approval.status === "approved" ? 1 : 0);
  });

  it("ISSUE24-2 no approver list: no buttons are offered (nothing is posted while the run waits), the admin decides as before", async () => {
    const s = await setup({ approvers: null });
    const chatId = -2_000_000_000 - Math.floor(Math.random() * 1e8);
    const update = {
      update_id: ++updateSeq,
      message: {
        message_id: 5,
        date: 1,
        chat: { id: chatId, type: "group" },
        from: { id: 20_000 + Math.floor(Math.random() * 1e8), is_bot: false, first_name: "Bo" },
        text: "go",
      },
    };
    await post(s.app, "/webhooks/telegram/main", JSON.stringify(update), TG);
    const key = `agent:main:telegram:${BOT_ID}:group:${chatId}`;
    await until(async () => (await runsOf(key))[0]?.status === "awaiting_approval");
    await new Promise((r) => setTimeout(r, 1500)); // the alarm had time to send anything it would
    expect(await postsAt(s.tg)).toEqual([]);
  });

  it("ISSUE24-2 an approval the pending limits refuse gets no buttons: the call is denied, the chat gets only the run's answer", async () => {
    const s = await setup({ runs: 2, maxPendingPerCaller: 1 });
    const asker = 30_000 + Math.floor(Math.random() * 1e8);
    await askInTelegram(s, asker); // the sender's one pending approval
    const chatId = -3_000_000_000 - Math.floor(Math.random() * 1e8);
    const update = {
      update_id: ++updateSeq,
      message: {
        message_id: 9,
        date: 1,
        chat: { id: chatId, type: "group" },
        from: { id: asker, is_bot: false, first_name: "Bo" },
        text: "again",
      },
    };
    await post(s.app, "/webhooks/telegram/main", JSON.stringify(update), TG);
    const key = `agent:main:telegram:${BOT_ID}:group:${chatId}`;
    await until(async () => (await runsOf(key))[0]?.status === "completed");
    const here = async () => (await postsAt(s.tg)).filter((p) => p.body.chat_id === String(chatId));
    await until(async () => (await here()).length === 1);
    expect((await here()).map((p) => [p.method, p.body.text, p.body.reply_markup])).toEqual([["sendMessage", "sent it", undefined]]);
    const rows = await env.DB.prepare("SELECT COUNT(*) AS n FROM approval_buttons WHERE chat_id = ?1").bind(String(chatId)).first();
    expect(rows).toEqual({ n: 0 });
  });

  it("ISSUE24-2 hostile arguments: secrets are redacted and the summary is bounded in the chat's message", async () => {
    const secret = env.TELEGRAM_BOT_TOKEN as string;
    const s = await setup({ args: { to: "ops@example.com", text: `key ${secret} ${"x".repeat(5000)}` } });
    const a = await askInTelegram(s);
    const text = a.prompt.body.text as string;
    expect(text).not.toContain(secret);
    expect(text).not.toContain(secret.split(":")[1] as string);
    expect(text.length).toBeLessThan(800);
    expect(text).toContain("…");
  });

  it("ISSUE24-2 the prompt is retried like a reply: a 429 first, then delivered once", async () => {
    const s = await setup({ tg: `flaky-${label()}.telegram.test` });
    await askInTelegram(s); // finds the first (failed) post; then the delivered one comes
    await until(async () => (await postsAt(s.tg)).filter((p) => p.method === "sendMessage" && p.answered === 200).length === 1, 15_000);
    const sends = (await postsAt(s.tg)).filter((p) => p.method === "sendMessage");
    expect(sends.map((p) => p.answered)).toEqual([429, 200]);
    expect(sends[0]?.body).toEqual(sends[1]?.body);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Slack

async function slackHeaders(raw: string, at = Math.floor(Date.now() / 1000), secret = env.SLACK_SIGNING_SECRET as string) {
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`v0:${at}:${raw}`)));
  return {
    "X-Slack-Request-Timestamp": String(at),
    "X-Slack-Signature": `v0=${[...mac].map((b) => b.toString(16).padStart(2, "0")).join("")}`,
  };
}

interface SlackAsked {
  channel: string;
  asker: string;
  runId: string;
  approvalId: string;
  prompt: PlatformPost;
  approve: string;
  deny: string;
  ts: string;
}

async function askInSlack(s: Setup): Promise<SlackAsked> {
  const channel = `C${label().toUpperCase()}`;
  const asker = `U${label().toUpperCase()}`; // a sender of its own (per-caller pending limit)
  const ts = `1700000000.${String(Math.floor(Math.random() * 1e6)).padStart(6, "0")}`;
  const raw = JSON.stringify({
    type: "event_callback",
    team_id: "T0TEAM",
    event_id: `Ev${label()}`,
    event: { type: "message", channel, channel_type: "channel", user: asker, text: "send it", ts },
  });
  expect((await post(s.app, "/webhooks/slack/main", raw, await slackHeaders(raw))).status).toBe(200);
  const key = `agent:main:slack:T0TEAM:group:${channel}`;
  await until(async () => (await runsOf(key))[0]?.status === "awaiting_approval");
  const runId = ((await runsOf(key))[0] as { id: string }).id;
  const approvalId = (await runDetail(s.app, runId)).events.find((e: Ev) => e.event_type === "approval.requested").payload
    .approval_id as string;
  await until(async () => (await postsAt(s.slack)).some((p) => p.method === "chat.postMessage"));
  const posts = await postsAt(s.slack);
  const prompt = posts.find((p) => p.method === "chat.postMessage") as PlatformPost;
  const actions = (prompt.body.blocks as { type: string; elements?: { action_id: string; value: string }[] }[]).find(
    (b) => b.type === "actions",
  );
  const value = (id: string) => actions?.elements?.find((e) => e.action_id === id)?.value as string;
  return {
    channel,
    asker,
    runId,
    approvalId,
    prompt,
    approve: value("sophie_approval_approve"),
    deny: value("sophie_approval_deny"),
    ts: `1700000000.${String(100000 + posts.indexOf(prompt))}`,
  };
}

function blockActions(a: SlackAsked, value: string, o: { user?: string; actionId?: string; triggerId?: string } = {}): string {
  const payload = {
    type: "block_actions",
    user: { id: o.user ?? SLACK_APPROVER, username: "ada", team_id: "T0TEAM" },
    team: { id: "T0TEAM", domain: "example" },
    channel: { id: a.channel, name: "ops" },
    container: { type: "message", message_ts: a.ts, channel_id: a.channel, is_ephemeral: false },
    message: { type: "message", ts: a.ts, text: "Approval needed" },
    trigger_id: o.triggerId ?? `trig.${label()}`,
    response_url: "https://hooks.slack.com/actions/T0TEAM/1/x",
    actions: [
      {
        type: "button",
        action_id: o.actionId ?? "sophie_approval_approve",
        block_id: "sophie_approval",
        value,
        action_ts: "1700000001.000100",
      },
    ],
  };
  return `payload=${encodeURIComponent(JSON.stringify(payload))}`;
}

const FORM = { "Content-Type": "application/x-www-form-urlencoded" };
async function pressSlack(s: Setup, raw: string, headers?: Record<string, string>) {
  return s.app.request(
    "https://gateway.test/webhooks/slack/main/interactivity",
    { method: "POST", headers: { ...FORM, ...(headers ?? (await slackHeaders(raw))) }, body: raw },
    env,
  );
}
const ephemerals = async (host: string) =>
  (await postsAt(host)).filter((p) => p.method === "chat.postEphemeral").map((p) => [p.body.user, p.body.text]);

describe("ISSUE24-2 Slack: block_actions on the interactivity URL", { timeout: 60_000 }, () => {
  it("ISSUE24-2 the prompt is posted in the thread with Block Kit buttons; approve → chat.update once, the run completes", async () => {
    const s = await setup();
    const a = await askInSlack(s);
    expect(a.prompt.body.channel).toBe(a.channel);
    expect(a.prompt.body.thread_ts).toBeTypeOf("string");
    const section = (a.prompt.body.blocks as { type: string; text?: { type: string; text: string } }[])[0];
    expect(section?.text?.type).toBe("plain_text"); // no mentions, no links from the model
    expect(a.approve).toMatch(/^apv1:[A-Za-z0-9_-]{22}$/);
    const res = await pressSlack(s, blockActions(a, a.approve));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
    expect((await waitForRun(s.app, a.runId)).status).toBe("completed");
    await until(async () => (await methods(s.slack)).length === 3);
    const posts = await postsAt(s.slack);
    // The prompt first; then the update (from the press) and the run's answer (from the outbox), in either order.
    expect(posts[0]?.method).toBe("chat.postMessage");
    expect(
      posts
        .slice(1)
        .map((p) => p.method)
        .sort(),
    ).toEqual(["chat.postMessage", "chat.update"]);
    const update = posts.find((p) => p.method === "chat.update")?.body as {
      channel: string;
      ts: string;
      text: string;
      blocks: { type: string }[];
    };
    expect([update.channel, update.ts]).toEqual([a.channel, a.ts]);
    expect(update.text.endsWith("✅ Approved by slack:U0APPROVER")).toBe(true);
    expect(update.blocks.map((b) => b.type)).toEqual(["section"]); // the buttons are gone
    expect(await approvalOf(s, a.approvalId)).toMatchObject({ status: "approved", decided_by: "slack:U0APPROVER", decided_via: "slack" });
  });

  it("ISSUE24-2 deny → the call is not run; a second press is refused with a note only the presser sees", async () => {
    const s = await setup();
    const a = await askInSlack(s);
    await pressSlack(s, blockActions(a, a.deny, { actionId: "sophie_approval_deny" }));
    expect((await waitForRun(s.app, a.runId)).status).toBe("completed");
    expect(invocations.filter((i) => i.runId === a.runId)).toHaveLength(0);
    expect(await approvalOf(s, a.approvalId)).toMatchObject({ status: "denied", decided_by: "slack:U0APPROVER", decided_via: "slack" });
    await pressSlack(s, blockActions(a, a.approve));
    expect(await ephemerals(s.slack)).toEqual([
      [SLACK_APPROVER, "This approval was already decided (its buttons were used by slack:U0APPROVER); nothing changed."],
    ]);
    expect((await postsAt(s.slack)).filter((p) => p.method === "chat.update")).toHaveLength(1);
  });

  it("ISSUE24-2 not an approver, a forged value, a Telegram button's token pressed in Slack: an ephemeral note, nothing decided", async () => {
    const s = await setup({ runs: 2 });
    const a = await askInSlack(s);
    const t = await askInTelegram(s);
    await pressSlack(s, blockActions(a, a.approve, { user: a.asker }));
    await pressSlack(s, blockActions(a, `apv1:${"z".repeat(22)}`));
    await pressSlack(s, blockActions(a, t.approveData)); // bound to Telegram and its chat
    const invalid = "This button is not valid (not one this gateway issued for this chat); nothing changed.";
    expect(await ephemerals(s.slack)).toEqual([
      [a.asker, "You are not on this agent's approver list; nothing changed."],
      [SLACK_APPROVER, invalid],
      [SLACK_APPROVER, invalid],
    ]);
    for (const id of [a.approvalId, t.approvalId]) expect((await approvalOf(s, id)).status).toBe("pending");
  });

  it("ISSUE24-2 a bad signature, a stale timestamp, another signing secret or no signature: 401 in the S3 envelope, nothing decided", async () => {
    const s = await setup();
    const a = await askInSlack(s);
    const raw = blockActions(a, a.approve);
    const stale = await slackHeaders(raw, Math.floor(Date.now() / 1000) - 301);
    const other = await slackHeaders(raw, undefined, "anothersigningsecret0123456789ab");
    const good = await slackHeaders(raw);
    const tampered = {
      ...good,
      "X-Slack-Signature": `${good["X-Slack-Signature"].slice(0, -1)}${good["X-Slack-Signature"].endsWith("0") ? "1" : "0"}`,
    };
    for (const headers of [stale, other, tampered, {}]) {
      const res = await pressSlack(s, raw, headers);
      expect(res.status).toBe(401);
      expect(await res.json()).toEqual({ error: { code: "auth.unauthorized", message: "the slack webhook could not be verified" } });
    }
    // The body altered after signing (the decision swapped to deny's value) is refused too.
    const res = await pressSlack(s, blockActions(a, a.deny), good);
    expect(res.status).toBe(401);
    expect((await approvalOf(s, a.approvalId)).status).toBe("pending");
    expect(await methods(s.slack)).toEqual(["chat.postMessage"]);
  });

  it("ISSUE24-2 a verified body that is not payload=<json> is 400; another interaction is acknowledged and ignored", async () => {
    const s = await setup();
    for (const raw of ["nothing=here", "payload=%7Bnot-json"]) {
      const res = await pressSlack(s, raw);
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid.request");
    }
    const shortcut = `payload=${encodeURIComponent(JSON.stringify({ type: "shortcut", callback_id: "x", trigger_id: "t" }))}`;
    const res = await pressSlack(s, shortcut);
    expect([res.status, await res.json()]).toEqual([200, { ok: true, ignored: true }]);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Configuration, the pure token rules, OpenAPI

describe("ISSUE24-2 configuration, tokens and OpenAPI", () => {
  const base = { models: { providers: { p: mockProvider("ok.provider.test") } } };
  const parse = (approvers: unknown) => parseGatewayConfig({ ...base, agents: { main: { approvers } } } as never);

  it("ISSUE24-2 agents.<id>.approvers: ids per channel; absent by default; the spec offers chat approvals only on a channel with someone listed", () => {
    const none = parseGatewayConfig({ ...base, agents: { main: {} } } as never);
    if (!none.ok) throw new Error(JSON.stringify(none.issues));
    expect(none.value.agents.main?.approvers).toBeUndefined();
    const r = parse({ telegram: ["9001"], slack: [] });
    if (!r.ok) throw new Error(JSON.stringify(r.issues));
    expect(r.value.agents.main?.approvers).toEqual({ telegram: ["9001"], slack: [] });
    expect(buildRunSpec(r.value, "main", "telegram").chatApprovals).toBe(true);
    expect(buildRunSpec(r.value, "main", "slack").chatApprovals).toBeUndefined(); // an empty list: nobody
    expect(buildRunSpec(r.value, "main", "http").chatApprovals).toBeUndefined();
    expect(buildRunSpec(none.value, "main", "telegram").chatApprovals).toBeUndefined();
  });

  it("ISSUE24-2 an unknown channel key, a non-string id, a malformed Telegram or Slack id are rejected, naming the field (fail closed)", () => {
    const cases: [unknown, string][] = [
      [{ discord: ["1"] }, "agents.main.approvers.discord"],
      [{ telegram: [9001] }, "agents.main.approvers.telegram[0]"],
      [{ telegram: ["@ada"] }, "agents.main.approvers.telegram[0]"],
      [{ slack: ["u0lower"] }, "agents.main.approvers.slack[0]"],
      [["9001"], "agents.main.approvers"],
    ];
    for (const [approvers, path] of cases) {
      const r = parse(approvers);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.issues[0]?.path).toBe(path);
    }
  });

  it("ISSUE24-2 tokens: 22 base64url characters, distinct over 2,000 draws; only `apv1:<token>` parses", () => {
    const tokens = new Set(Array.from({ length: 2000 }, () => mintButtonToken()));
    expect(tokens.size).toBe(2000);
    for (const t of tokens) {
      expect(t).toMatch(/^[A-Za-z0-9_-]{22}$/);
      expect(parseButtonData(`apv1:${t}`)).toBe(t);
    }
    for (const bad of [
      "apv1:",
      `apv2:${"A".repeat(22)}`,
      `apv1:${"A".repeat(21)}`,
      `apv1:${"A".repeat(23)}`,
      `apv1:${"A".repeat(21)}=`,
      null,
      42,
    ]) {
      expect(parseButtonData(bad)).toBeNull();
    }
  });

  it("ISSUE24-2 OpenAPI: the interactivity route and its refusals; approvals carry decided_by and decided_via", async () => {
    const s = await setup();
    const doc = (await (await s.app.request("https://gateway.test/openapi.json", {}, env)).json()) as {
      paths: Record<string, any>;
      components: { schemas: Record<string, any> };
    };
    expect(Object.keys(doc.paths["/webhooks/slack/{agent_id}/interactivity"].post.responses).sort()).toEqual(["200", "400", "401", "404"]);
    for (const name of ["Approval", "ApprovalSummary"]) {
      expect(doc.components.schemas[name].properties.decided_by).toBeDefined();
      expect(doc.components.schemas[name].properties.decided_via.enum).toEqual(["admin", "telegram", "slack", null]);
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------
// D-081: the message follows an approval decided elsewhere (the admin API, the dashboard) or expired.

const edits = async (host: string, method = "editMessageText") => (await postsAt(host)).filter((p) => p.method === method);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const stubOfRun = (runId: string) => env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(runId) as string));
const promptRow = async (runId: string, approvalId: string) =>
  (await runInDurableObject(stubOfRun(runId), (_i, state: DurableObjectState) =>
    state.storage.sql.exec("SELECT status, attempts, target FROM reply_outbox WHERE run_id = ?", approvalId).toArray(),
  )) as { status: string; attempts: number; target: string }[];
/** The prompt's row once its edit was delivered. */
const settledEdit = async (runId: string, approvalId: string) => {
  const edited = async () => {
    const row = (await promptRow(runId, approvalId))[0];
    return row?.status === "delivered" && row.target.includes('"edit"');
  };
  await until(edited, 15_000);
  return (await promptRow(runId, approvalId))[0];
};

describe("ISSUE24-2 the chat message follows a decision taken elsewhere, or the expiry (D-081)", { timeout: 60_000 }, () => {
  it("ISSUE24-2 admin approve → exactly one editMessageText: the request, then 'Approved by admin', and no keyboard", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    const decided = await call(s.app, "POST", `/api/admin/approvals/${a.approvalId}`, { decision: "approve" }, ADMIN);
    expect(decided.status).toBe(200);
    expect((await waitForRun(s.app, a.runId)).status).toBe("completed");
    await settledEdit(a.runId, a.approvalId);
    await sleep(300); // nothing more comes
    const edited = await edits(s.tg);
    expect(edited.map((p) => [p.answered, p.body])).toEqual([
      [200, { chat_id: String(a.chatId), message_id: a.messageId, text: `${a.prompt.body.text}\n\n✅ Approved by admin` }],
    ]);
    expect(edited[0]?.body).not.toHaveProperty("reply_markup"); // the inline keyboard goes with the edit
    expect((await postsAt(s.tg)).filter((p) => p.method === "sendMessage").map((p) => p.body.text)).toEqual([
      a.prompt.body.text,
      "sent it",
    ]);
    const audit = await auditEvents(s, a.sessionKey, (events) => events.some((e) => e.event_type === "approval.prompt.edited"));
    expect(audit.find((e) => e.event_type === "approval.prompt.edited")?.payload).toEqual({
      approval_id: a.approvalId,
      channel: "telegram",
      outcome: "approved",
    });
  });

  it("ISSUE24-2 admin deny on Slack → exactly one chat.update with the outcome and no buttons", async () => {
    const s = await setup();
    const a = await askInSlack(s);
    expect((await call(s.app, "POST", `/api/admin/approvals/${a.approvalId}`, { decision: "deny" }, ADMIN)).status).toBe(200);
    expect((await waitForRun(s.app, a.runId)).status).toBe("completed");
    await settledEdit(a.runId, a.approvalId);
    await sleep(300);
    const raw = (a.prompt.body.blocks as { text: { text: string } }[])[0]?.text.text as string;
    expect((await edits(s.slack, "chat.update")).map((p) => [p.answered, p.body])).toEqual([
      [
        200,
        {
          channel: a.channel,
          ts: a.ts,
          text: `${a.prompt.body.text}\n\n⛔ Denied by admin`,
          blocks: [{ type: "section", text: { type: "plain_text", text: `${raw}\n\n⛔ Denied by admin`, emoji: true } }],
        },
      ],
    ]);
  });

  it("ISSUE24-2 expiry (the alarm) → one edit saying nobody decided in time; a later press is refused and edits nothing more", async () => {
    const s = await setup();
    const a = await askInTelegram(s);
    await runInDurableObject(stubOfRun(a.runId), (_i, state: DurableObjectState) => {
      state.storage.sql.exec("UPDATE approvals SET expires_at = ? WHERE id = ?", new Date(Date.now() - 1000).toISOString(), a.approvalId);
    });
    await runDurableObjectAlarm(stubOfRun(a.runId));
    expect((await approvalOf(s, a.approvalId)).status).toBe("expired");
    await settledEdit(a.runId, a.approvalId);
    await pressTelegram(s, a, a.approveData);
    expect(await alerts(s.tg)).toEqual(["This approval has expired; nothing changed. The call was not run."]);
    await sleep(300);
    expect((await edits(s.tg)).map((p) => p.body.text)).toEqual([
      `${a.prompt.body.text}\n\n⌛ Expired — nobody decided in time. The call was not run.`,
    ]);
    expect(invocations.filter((i) => i.runId === a.runId)).toHaveLength(0);
  });

  it("ISSUE24-2 decided while the prompt is still undelivered (its first post refused with 429): the prompt is never sent, nothing is edited", async () => {
    const s = await setup({ tg: `flaky-${label()}.telegram.test` });
    const a = await askInTelegram(s); // the 429'd post; the retry waits 2 s
    expect(a.prompt.answered).toBe(429);
    expect((await call(s.app, "POST", `/api/admin/approvals/${a.approvalId}`, { decision: "approve" }, ADMIN)).status).toBe(200);
    await until(async () => (await promptRow(a.runId, a.approvalId))[0]?.status === "skipped", 15_000);
    expect((await waitForRun(s.app, a.runId)).status).toBe("completed");
    await sleep(300);
    const posts = await postsAt(s.tg);
    expect(posts.map((p) => [p.method, p.answered])).toEqual([
      ["sendMessage", 429],
      ["sendMessage", 200], // the run's own answer
    ]);
    expect(posts[1]?.body.text).toBe("sent it");
    expect(JSON.parse((await promptRow(a.runId, a.approvalId))[0]?.target as string)).not.toHaveProperty("edit");
  });

  it("ISSUE24-2 the edit answered 429 first is retried once and delivered once", async () => {
    const s = await setup({ tg: `editflaky-${label()}.telegram.test` });
    const a = await askInTelegram(s);
    expect((await call(s.app, "POST", `/api/admin/approvals/${a.approvalId}`, { decision: "deny" }, ADMIN)).status).toBe(200);
    const row = await settledEdit(a.runId, a.approvalId);
    expect(row?.attempts).toBe(2);
    await sleep(300);
    const edited = await edits(s.tg);
    expect(edited.map((p) => p.answered)).toEqual([429, 200]);
    expect(edited[0]?.body).toEqual(edited[1]?.body);
    expect(edited[1]?.body.text).toBe(`${a.prompt.body.text}\n\n⛔ Denied by admin`);
  });

  it("ISSUE24-2 evictDurableObject between the decision and the edit loses nothing: the edit is sent after the eviction, once", async () => {
    const flaky = await setup({ tg: `editflaky-${label()}.telegram.test` });
    const a = await askInTelegram(flaky);
    expect((await call(flaky.app, "POST", `/api/admin/approvals/${a.approvalId}`, { decision: "approve" }, ADMIN)).status).toBe(200);
    await until(async () => (await edits(flaky.tg)).length === 1); // the 429: the edit now waits in the outbox
    // Held back while the object is evicted, so that the eviction surely falls between the decision and the edit.
    const hold = (at: number) =>
      runInDurableObject(stubOfRun(a.runId), (_i, state: DurableObjectState) => {
        state.storage.sql.exec("UPDATE reply_outbox SET next_attempt_at = ? WHERE run_id = ?", at, a.approvalId);
      });
    await hold(Date.now() + 3_600_000);
    await evictDurableObject(stubOfRun(a.runId));
    const kept = (await promptRow(a.runId, a.approvalId))[0];
    expect([kept?.status, kept?.attempts, JSON.parse(kept?.target as string).edit]).toEqual([
      "pending",
      1,
      { status: "approved", by: "admin" },
    ]);
    expect(await edits(flaky.tg)).toHaveLength(1);
    await hold(0);
    await runDurableObjectAlarm(stubOfRun(a.runId));
    await settledEdit(a.runId, a.approvalId);
    await sleep(300);
    expect((await edits(flaky.tg)).map((p) => [p.answered, p.body.text])).toEqual([
      [429, `${a.prompt.body.text}\n\n✅ Approved by admin`],
      [200, `${a.prompt.body.text}\n\n✅ Approved by admin`],
    ]);
  });
});

/**
 * Issue 21 §9 (S1 §3.4, S3 §2): a failure-loop escalation never leaks to a channel user. The run still
 * completes with the full escalation (tools, errors, output snippets) in the admin run view; Telegram, Slack
 * and Standard Webhooks replies carry one code and one actionable sentence, nothing of the trace.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ESCALATION_REPLY } from "../../src/channels/replies";
import { signWebhook, webhookKey } from "../../src/channels/standard-webhooks";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { PlatformPost, ReceivedHook } from "../support/outbound";
import { appFor, registerTestTools, runDetail, until } from "../support/runs";

registerTestTools();

const BOT_ID = "7000000001"; // TELEGRAM_BOT_TOKEN's numeric id (vitest.config.ts)
const label = () => crypto.randomUUID().slice(0, 8);
const fail = (id: string) => ({ tool_calls: [{ id, name: "test__fail", arguments: "{}" }] });
/** Five failing tool results: two to enter recovery, three more to escalate (S3 §2 defaults). */
const FAILING = [fail("f1"), fail("f2"), fail("f3"), fail("f4"), fail("f5"), { content: "never asked" }];
const ATTEMPT = "test.fail: failed — error: tool.input_invalid: no file at missing.txt";

async function escalatingApp(o: { telegram?: string; slack?: string; replyUrl?: string }) {
  const provider = uniqueHost("script");
  await scriptProvider(provider, FAILING);
  return appFor(
    runConfig(provider, {
      channels: {
        telegram: { enabled: true, apiBaseUrl: `https://${o.telegram ?? `ok-${label()}.telegram.test`}` },
        slack: { enabled: true, apiBaseUrl: `https://${o.slack ?? `ok-${label()}.slack.test`}/api` },
        standard: { enabled: true, ...(o.replyUrl ? { replyUrl: o.replyUrl } : {}) },
      },
    }),
  );
}

const post = (app: ReturnType<typeof appFor>, path: string, body: string, headers: Record<string, string>) =>
  app.request(`https://gateway.test${path}`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body }, env);

async function postsAt(host: string): Promise<PlatformPost[]> {
  return (await fetch(`https://mock.control/platform?host=${host}`)).json();
}

async function onlyRunOf(sessionKey: string): Promise<string> {
  const rows = (await runInDurableObject(env.SESSIONS.getByName(sessionKey), (_, state) =>
    state.storage.sql.exec("SELECT id FROM runs").toArray(),
  )) as { id: string }[];
  expect(rows).toHaveLength(1);
  return rows[0]?.id as string;
}

/** The admin run view keeps the whole escalation: every attempt with its error, and the needs_guidance flag. */
async function expectFullEscalationInRunView(app: ReturnType<typeof appFor>, runId: string) {
  const detail = await runDetail(app, runId);
  expect(detail.run.status).toBe("completed");
  for (const n of [1, 2, 3, 4, 5]) expect(detail.run.output).toContain(`${n}. ${ATTEMPT}`);
  expect(detail.events.at(-1)).toMatchObject({ event_type: "run.completed", payload: { needs_guidance: true } });
}

/** Nothing of the trace: no tool name, no error code or text, no snippet heading. */
function expectNoTrace(text: string) {
  for (const leak of ["test.fail", "test__fail", "tool.input_invalid", "missing.txt", "Recent attempts", "error:"])
    expect(text).not.toContain(leak);
}

describe("ISSUE21-9 escalations never leak to channel users (S1 §3.4)", () => {
  it("ISSUE21-9 the channel reply is one code and an actionable sentence", () => {
    expect(ESCALATION_REPLY).toBe(
      "[internal.error] I stopped after repeated tool errors. Please reply with different inputs or another approach, or ask an operator to check the run.",
    );
  });

  it("ISSUE21-9 Telegram: a failure-loop escalation is answered with exactly the short text; the admin run view keeps the full escalation", async () => {
    const tg = `ok-${label()}.telegram.test`;
    const app = await escalatingApp({ telegram: tg });
    const fromId = 8_000_000 + Math.floor(Math.random() * 1e6);
    const update = {
      update_id: Math.floor(Math.random() * 1e9),
      message: {
        message_id: 77,
        date: 1_700_000_000,
        chat: { id: fromId, type: "private" },
        from: { id: fromId, is_bot: false },
        text: "do it",
      },
    };
    const res = await post(app, "/webhooks/telegram/main", JSON.stringify(update), {
      "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string,
    });
    expect(res.status).toBe(200);
    await until(async () => (await postsAt(tg)).length === 1);
    await new Promise((r) => setTimeout(r, 200));
    const posts = await postsAt(tg);
    expect(posts).toEqual([
      {
        host: tg,
        method: "sendMessage",
        body: { chat_id: String(fromId), text: ESCALATION_REPLY, reply_parameters: { message_id: 77, allow_sending_without_reply: true } },
        authorized: true,
        answered: 200,
      },
    ]);
    expectNoTrace(JSON.stringify(posts));
    await expectFullEscalationInRunView(app, await onlyRunOf(`agent:main:telegram:${BOT_ID}:dm:${fromId}`));
  });

  it("ISSUE21-9 Slack: a failure-loop escalation is answered with exactly the short text; the admin run view keeps the full escalation", async () => {
    const sl = `ok-${label()}.slack.test`;
    const app = await escalatingApp({ slack: sl });
    const channel = `C${label().toUpperCase()}`;
    const ts = `1700000000.${String(Math.floor(Math.random() * 1e6)).padStart(6, "0")}`;
    const raw = JSON.stringify({
      type: "event_callback",
      team_id: "T0TEAM",
      event_id: `Ev${label()}`,
      event: { type: "message", channel, channel_type: "channel", user: "U0USER", text: "do it", ts },
    });
    const at = Math.floor(Date.now() / 1000);
    const key = await crypto.subtle.importKey(
      "raw",
      new TextEncoder().encode(env.SLACK_SIGNING_SECRET as string),
      { name: "HMAC", hash: "SHA-256" },
      false,
      ["sign"],
    );
    const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`v0:${at}:${raw}`)));
    const res = await post(app, "/webhooks/slack/main", raw, {
      "X-Slack-Request-Timestamp": String(at),
      "X-Slack-Signature": `v0=${[...mac].map((b) => b.toString(16).padStart(2, "0")).join("")}`,
    });
    expect(res.status).toBe(200);
    await until(async () => (await postsAt(sl)).length === 1);
    await new Promise((r) => setTimeout(r, 200));
    const posts = await postsAt(sl);
    expect(posts).toEqual([
      { host: sl, method: "chat.postMessage", body: { channel, text: ESCALATION_REPLY, thread_ts: ts }, authorized: true, answered: 200 },
    ]);
    expectNoTrace(JSON.stringify(posts));
    await expectFullEscalationInRunView(app, await onlyRunOf(`agent:main:slack:T0TEAM:group:${channel}`));
  });

  it("ISSUE21-9 Standard Webhooks: the signed reply carries exactly the short text; the admin run view keeps the full escalation", async () => {
    const hook = `ok-${label()}.hook.test`;
    const app = await escalatingApp({ replyUrl: `https://${hook}/replies` });
    const body = JSON.stringify({ user_id: "u-1", room_id: `room-${label()}`, message: "do it" });
    const id = `msg_${label()}`;
    const at = Math.floor(Date.now() / 1000);
    const key = webhookKey(env.STANDARD_WEBHOOK_SECRET) as Uint8Array;
    const res = await post(app, "/webhooks/standard/main", body, {
      "webhook-id": id,
      "webhook-timestamp": String(at),
      "webhook-signature": await signWebhook(key, id, at, body),
    });
    expect(res.status).toBe(202);
    const { run_id } = (await res.json()) as { run_id: string };
    const hooks = async () => (await (await fetch(`https://mock.control/hooks?host=${hook}`)).json()) as ReceivedHook[];
    await until(async () => (await hooks()).length === 1);
    const [reply] = await hooks();
    const sent = JSON.parse(reply?.body ?? "");
    expect(sent.data.message).toBe(ESCALATION_REPLY);
    expectNoTrace(reply?.body ?? "");
    await expectFullEscalationInRunView(app, run_id);
  });
});

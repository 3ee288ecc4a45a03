/**
 * Issue 21 §12 (S1 §2.4): the channel policy flags are read by the paths they govern. `external_email`
 * ("require approval to send"): a `message.send` to an email-like channel waits for a human even where the
 * honeypot exception (S1 §3.3 Phase 2) or a policy without side-effect approvals would let it go. Final-only:
 * a streamed model answer reaches a chat channel once, whole.
 */

import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { channelSenders } from "../../src/channels/outbound";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import type { PlatformPost } from "../support/outbound";
import { ADMIN, appFor, call, runDetail, startRun, until } from "../support/runs";

const delivered: { channel: string; to: string; text: string }[] = [];
for (const channel of ["smtp", "plainchan"])
  if (!channelSenders.get(channel))
    channelSenders.register(channel, {
      send: async (msg) => {
        delivered.push({ channel, to: msg.to, text: msg.text });
        return { messageId: `m${delivered.length}` };
      },
    });

const honeypot = {
  templates: { ready: "Your report {name} is ready." },
  recipientTypes: ["email", "user"],
  perRecipientPerHour: 5,
  perAgentPerHour: 10,
};
const sendCall = (channel: string, to: string, recipient_type = "email") => ({
  tool_calls: [
    {
      id: "s1",
      name: "message__send",
      arguments: JSON.stringify({ channel, to, recipient_type, template: "ready", vars: { name: "Q3" } }),
    },
  ],
});
const REASON = 'message.send on channel "smtp" (external_email policy) needs a human approval for every send';

async function awaitingApproval(host: string, policy: Record<string, unknown>, channel: string, to: string) {
  const agentId = `mail-${crypto.randomUUID().slice(0, 8)}`;
  await scriptProvider(host, [sendCall(channel, to), { content: "done" }]);
  const app = appFor(runConfig(host, { agentId, agent: { tools: { allow: ["message.send"] } }, policy }));
  const id = await startRun(app, "tell them", agentId);
  return { app, id };
}

describe("ISSUE21-12 channel policy flags are obeyed (S1 §2.4)", () => {
  it("ISSUE21-12 external_email requires approval to send: a templated send the honeypot exception would allow waits for a human", async () => {
    // Control: the same templated send to a chat channel goes without approval (honeypot exception).
    const control = await awaitingApproval(uniqueHost("script"), { honeypot }, "plainchan", `u-${crypto.randomUUID().slice(0, 6)}`);
    await until(async () => (await call(control.app, "GET", `/v1/runs/${control.id}`)).body.status === "completed");
    const allowed = (await runDetail(control.app, control.id)).events.find((e: any) => e.event_type === "tool.result");
    expect(allowed.payload.gate).toMatchObject({ outcome: "allowed", reason: "honeypot exception (S1 §3.3 Phase 2)" });

    const to = `${crypto.randomUUID().slice(0, 6)}@example.com`;
    const { app, id } = await awaitingApproval(uniqueHost("script"), { honeypot }, "smtp", to);
    await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
    const requested = (await runDetail(app, id)).events.find((e: any) => e.event_type === "approval.requested");
    expect(requested.payload).toMatchObject({ tool: "message.send", tool_call_id: "s1", reason: REASON });
    expect(delivered.filter((d) => d.to === to)).toEqual([]);

    // Approved, it is sent once, as rendered.
    const decided = await call(app, "POST", `/api/admin/approvals/${requested.payload.approval_id}`, { decision: "approve" }, ADMIN);
    expect(decided.status).toBe(200);
    await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "completed");
    expect(delivered.filter((d) => d.to === to)).toEqual([{ channel: "smtp", to, text: "Your report Q3 is ready." }]);
  });

  it("ISSUE21-12 external_email requires approval to send even when tools.policy.approvalRequired asks for none", async () => {
    const to = `${crypto.randomUUID().slice(0, 6)}@example.com`;
    const { app, id } = await awaitingApproval(uniqueHost("script"), { approvalRequired: [] }, "smtp", to);
    await until(async () => (await call(app, "GET", `/v1/runs/${id}`)).body.status === "awaiting_approval");
    const requested = (await runDetail(app, id)).events.find((e: any) => e.event_type === "approval.requested");
    expect(requested.payload.reason).toBe(REASON);
    expect(delivered.filter((d) => d.to === to)).toEqual([]);
  });
});

describe("ISSUE21-12 final-only: every channel gets the final answer only (S1 §2.4, §5.5)", () => {
  it("ISSUE21-12 a streamed model answer reaches Telegram as one sendMessage with the whole text, after the run ended", async () => {
    const provider = uniqueHost("script");
    const answer = "The answer is forty-two, and here is why it holds.";
    await scriptProvider(provider, [{ content: answer }]);
    const tg = `ok-${crypto.randomUUID().slice(0, 8)}.telegram.test`;
    const app = appFor(
      runConfig(provider, {
        model: { supportsStreaming: true },
        agent: { tools: { allow: [] } },
        channels: { telegram: { enabled: true, apiBaseUrl: `https://${tg}` } },
      }),
    );
    const fromId = 9_000_000 + Math.floor(Math.random() * 1e6);
    const update = {
      update_id: Math.floor(Math.random() * 1e9),
      message: {
        message_id: 5,
        date: 1_700_000_000,
        chat: { id: fromId, type: "private" },
        from: { id: fromId, is_bot: false },
        text: "why?",
      },
    };
    const res = await app.request(
      "https://gateway.test/webhooks/telegram/main",
      {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": env.TELEGRAM_WEBHOOK_SECRET as string },
        body: JSON.stringify(update),
      },
      env,
    );
    expect(res.status).toBe(200);
    const posts = async () => (await (await fetch(`https://mock.control/platform?host=${tg}`)).json()) as PlatformPost[];
    await until(async () => (await posts()).length === 1);
    await new Promise((r) => setTimeout(r, 300));
    // The provider streamed it (in 3-character deltas); the channel got it once, whole.
    expect((await bodiesSentTo(provider)).map((b) => b.stream)).toEqual([true]);
    expect((await posts()).map((p) => [p.method, p.body.text])).toEqual([["sendMessage", answer]]);
  });
});

/**
 * Issue 20 §2, where the output guard applies beyond the run's own reply: a
 * channel reply (Telegram, end to end), `message.send` and `email.draft`
 * bodies (in the handlers too, for calls that do not come from a model turn,
 * such as sandbox tool callbacks), and the channel reply text itself.
 */
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { type ChannelSender, channelSenders } from "../../src/channels/outbound";
import { guardedReplyText } from "../../src/channels/replies";
import { disclosureRefusalMessage } from "../../src/prompts/disclosure";
import { WITHHELD_ERROR } from "../../src/prompts/tool-args-guard";
import { emailDraft } from "../../src/tools/builtin/email";
import { messageSend } from "../../src/tools/builtin/message";
import type { ToolContext } from "../../src/tools/registry";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { baseSection, DISGUISES } from "../support/leaks";
import type { PlatformPost } from "../support/outbound";
import { appFor, until } from "../support/runs";

const SECTION = baseSection("Order of authority");
const label = () => crypto.randomUUID().slice(0, 8);
const ctx = (agentId = "guarded"): ToolContext => ({
  env,
  agentId,
  runId: "run_guard",
  sessionKey: `agent:${agentId}:main`,
  channel: "http",
  capabilities: [],
  toolCallId: "t1",
  signal: new AbortController().signal,
  timeoutMs: 30_000,
});

afterEach(() => channelSenders.unregister("guardchan"));

describe("ISSUE20-§2 channel replies", () => {
  it("a Telegram user whose model leaks L1 in look-alike letters receives the refusal, never the text", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: DISGUISES.homoglyphs?.(SECTION) ?? "" }]);
    const tg = `ok-${label()}.telegram.test`;
    const app = appFor(
      runConfig(host, { agent: { tools: { allow: [] } }, channels: { telegram: { enabled: true, apiBaseUrl: `https://${tg}` } } }),
    );
    const update = {
      update_id: Math.floor(Math.random() * 1e9),
      message: {
        message_id: 5,
        date: 1_700_000_000,
        chat: { id: 4242, type: "private" },
        from: { id: 4242, is_bot: false, first_name: "Eve" },
        text: "hi",
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
    const posts = async (): Promise<PlatformPost[]> => (await fetch(`https://mock.control/platform?host=${tg}`)).json();
    await until(async () => (await posts()).length === 1);
    expect((await posts()).map((p) => (p.body as { text: string }).text)).toEqual([disclosureRefusalMessage()]);
  });

  it("the channel reply text is checked once more before it leaves: hidden text → the refusal; other text redacted as before", () => {
    expect(guardedReplyText(DISGUISES.base64?.(SECTION) ?? "", [])).toBe(disclosureRefusalMessage());
    expect(guardedReplyText("the key is sk-live-0123456789abcdef", ["sk-live-0123456789abcdef"])).not.toContain("sk-live-0123456789abcdef");
    expect(guardedReplyText("hello", [])).toBe("hello");
  });
});

describe("ISSUE20-§2 message.send and email.draft bodies", () => {
  it("message.send refuses a body that carries hidden-layer text (policy.denied) and its adapter is never called", async () => {
    const sent: string[] = [];
    const sender: ChannelSender = {
      send: async (msg) => {
        sent.push(msg.text);
        return { messageId: "m-1" };
      },
    };
    channelSenders.register("guardchan", sender);
    const leak = DISGUISES.reversed?.(SECTION) ?? "";
    const out = await messageSend.handler({ channel: "guardchan", to: "u1", recipient_type: "user", text: leak }, ctx());
    expect(out).toEqual({ ok: false, error: { ...WITHHELD_ERROR } });
    expect(sent).toEqual([]);
    expect(
      await messageSend.handler({ channel: "guardchan", to: "u1", recipient_type: "user", text: "See you at 10." }, ctx()),
    ).toMatchObject({
      ok: true,
    });
    expect(sent).toEqual(["See you at 10."]);
  });

  it("email.draft refuses a body that carries hidden-layer text (policy.denied) and stores nothing", async () => {
    const agent = `guard${label()}`;
    const leak = DISGUISES.zero_width_split?.(SECTION) ?? "";
    const out = await emailDraft.handler({ to: ["a@example.com"], subject: "notes", body: leak }, ctx(agent));
    expect(out).toEqual({ ok: false, error: { ...WITHHELD_ERROR } });
    expect((await env.AUDIT.list({ prefix: `agents/${agent}/drafts/` })).objects).toEqual([]);
  });
});

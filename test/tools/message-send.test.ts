/**
 * `message.send` (DESIGN "Tool names": side_effect, for S1 §3.3): adapter
 * lookup in `channelSenders`, text and template messages, the exact output
 * and summary, input validation (exactly one of text/template), and S1 §3.4
 * failures — one code, an actionable message, never the adapter's own error.
 */

import { env } from "cloudflare:workers";
import { Validator } from "@cfworker/json-schema";
import { afterEach, describe, expect, it } from "vitest";
import { type ChannelSender, ChannelSenderRegistry, channelSenders, type OutboundMessage } from "../../src/channels/outbound";
import { HoneypotConfig } from "../../src/config/honeypot";
import { BUILTIN_TOOLS } from "../../src/tools/builtin";
import { createMessageSend, honeypotArgs, messageSend } from "../../src/tools/builtin/message";
import { type ToolContext, type ToolDefinition, tools } from "../../src/tools/registry";
import { checkToolSchema } from "../../src/tools/schema-rules";

const CHANNEL = "testchan";

const ctx = (agentId = "sender", signal: AbortSignal = new AbortController().signal): ToolContext => ({
  env,
  agentId,
  runId: "run_msg",
  sessionKey: `agent:${agentId}:main`,
  channel: "http",
  capabilities: [],
  toolCallId: "t1",
  signal,
  timeoutMs: 30_000,
});

/** A sender that records what it was asked to send and answers with `answer`. */
function fakeSender(answer: (msg: OutboundMessage) => Promise<{ messageId: string }> = async () => ({ messageId: "m-1" })) {
  const sent: { msg: OutboundMessage; agentId: string }[] = [];
  const sender: ChannelSender = {
    send: async (msg, c) => {
      sent.push({ msg, agentId: c.agentId });
      return answer(msg);
    },
  };
  return { sender, sent };
}

const send = (input: Record<string, unknown>, tool: ToolDefinition = messageSend, c: ToolContext = ctx()) => tool.handler(input, c);

const honeypot = HoneypotConfig.parse({
  templates: { greeting: "Hi {name}, thanks for your message.", plain: "Thanks, we got it." },
  recipientTypes: ["user"],
});

afterEach(() => {
  channelSenders.unregister(CHANNEL);
});

describe("DESIGN Tool names: message.send is a side_effect built-in", () => {
  it("is registered in the shared registry as side_effect", () => {
    expect(BUILTIN_TOOLS).toContain(messageSend);
    expect(tools.get("message.send")).toBe(messageSend);
    expect(messageSend.risk).toBe("side_effect");
  });

  it("S1 §3.1 schema rules hold for its JSON Schema", () => {
    expect(checkToolSchema(messageSend.parameters)).toEqual([]);
    expect(messageSend.parameters.required).toEqual(["channel", "to", "recipient_type"]);
    expect(Object.keys(messageSend.parameters.properties as object)).toEqual([
      "channel",
      "to",
      "recipient_type",
      "text",
      "template",
      "vars",
      "attachments",
    ]);
  });

  it("the JSON Schema agrees with the handler on field-level validation", async () => {
    const samples: [Record<string, unknown>, boolean][] = [
      [{ channel: "nowhere", to: "u1", recipient_type: "user", text: "hi" }, true],
      [{ channel: "Nowhere", to: "u1", recipient_type: "user", text: "hi" }, false],
      [{ channel: "nowhere", to: "", recipient_type: "user", text: "hi" }, false],
      [{ channel: "nowhere", to: "u1", recipient_type: "sms", text: "hi" }, false],
      [{ channel: "nowhere", to: "u1", recipient_type: "user", text: "x".repeat(4001) }, false],
      [{ channel: "nowhere", to: "u1", recipient_type: "user", template: "Bad Id" }, false],
      [{ channel: "nowhere", to: "u1", recipient_type: "user", template: "greeting", vars: { "bad key": "x" } }, false],
      [{ channel: "nowhere", to: "u1", recipient_type: "user", text: "hi", attachments: [{ name: "a", url: "ftp://x" }] }, false],
      [{ channel: "nowhere", to: "u1", recipient_type: "user", text: "hi", extra: 1 }, false],
    ];
    for (const [input, valid] of samples) {
      const bySchema = new Validator(messageSend.parameters as never, "2020-12").validate(input).valid;
      const outcome = await send(input);
      const byHandler = outcome.ok || outcome.error.code !== "tool.input_invalid";
      expect({ input, bySchema, byHandler }).toEqual({ input, bySchema: valid, byHandler: valid });
    }
  });
});

describe("message.send: adapters", () => {
  it("no adapter for the channel → invalid.request, nothing sent", async () => {
    expect(await send({ channel: "nowhere", to: "u1", recipient_type: "user", text: "hi" })).toEqual({
      ok: false,
      error: { code: "invalid.request", message: 'no adapter for channel "nowhere" is configured, so nothing was sent' },
    });
  });

  it("sends text through the registered adapter; output and summary exact", async () => {
    const { sender, sent } = fakeSender();
    channelSenders.register(CHANNEL, sender);
    expect(await send({ channel: CHANNEL, to: "u1", recipient_type: "user", text: "Hello there" }, messageSend, ctx("agent-a"))).toEqual({
      ok: true,
      output: { channel: CHANNEL, to: "u1", message_id: "m-1" },
      summary: `sent to user u1 via ${CHANNEL}`,
    });
    expect(sent).toEqual([{ msg: { to: "u1", recipientType: "user", text: "Hello there", attachments: [] }, agentId: "agent-a" }]);
  });

  it("passes attachments through", async () => {
    const { sender, sent } = fakeSender(async () => ({ messageId: "m-2" }));
    channelSenders.register(CHANNEL, sender);
    const attachments = [{ name: "report.pdf", url: "https://files.test/report.pdf" }];
    expect(await send({ channel: CHANNEL, to: "team", recipient_type: "group", text: "See attached", attachments })).toEqual({
      ok: true,
      output: { channel: CHANNEL, to: "team", message_id: "m-2" },
      summary: `sent to group team via ${CHANNEL}`,
    });
    expect(sent[0]?.msg.attachments).toEqual(attachments);
  });
});

describe("message.send: templates", () => {
  it("renders the template from the honeypot config and sends the rendered text", async () => {
    const { sender, sent } = fakeSender();
    channelSenders.register(CHANNEL, sender);
    const tool = createMessageSend({ honeypot });
    expect(await send({ channel: CHANNEL, to: "u1", recipient_type: "user", template: "greeting", vars: { name: "Ana" } }, tool)).toEqual({
      ok: true,
      output: { channel: CHANNEL, to: "u1", message_id: "m-1" },
      summary: `sent to user u1 via ${CHANNEL}`,
    });
    expect(sent.map((s) => s.msg.text)).toEqual(["Hi Ana, thanks for your message."]);
  });

  it("S1 §3.3 Phase 2: a delivered templated send counts toward the rate limits; a failed one does not", async () => {
    const agentId = `ms-${crypto.randomUUID().slice(0, 8)}`;
    const now = new Date("2025-06-01T12:00:00.000Z");
    const tool = createMessageSend({ honeypot, now: () => now });
    const { sender } = fakeSender(async (msg) => {
      if (msg.text.startsWith("Thanks")) throw new Error("boom");
      return { messageId: "m-1" };
    });
    channelSenders.register(CHANNEL, sender);
    await send({ channel: CHANNEL, to: "U1", recipient_type: "user", template: "greeting", vars: { name: "Ana" } }, tool, ctx(agentId));
    await send({ channel: CHANNEL, to: "u1", recipient_type: "user", template: "plain" }, tool, ctx(agentId));
    await send({ channel: CHANNEL, to: "u1", recipient_type: "user", text: "free text" }, tool, ctx(agentId));
    const rows = await env.DB.prepare("SELECT recipient, sent_at FROM honeypot_sends WHERE agent_id = ?").bind(agentId).all();
    expect(rows.results).toEqual([{ recipient: `${CHANNEL}:u1`, sent_at: now.getTime() }]);
  });

  it("the default instance has no templates", async () => {
    channelSenders.register(CHANNEL, fakeSender().sender);
    expect(await send({ channel: CHANNEL, to: "u1", recipient_type: "user", template: "greeting", vars: { name: "Ana" } })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: 'no template "greeting" is configured; send text instead' },
    });
  });

  it("a template whose vars do not fill it → tool.input_invalid naming the placeholder", async () => {
    const { sender, sent } = fakeSender();
    channelSenders.register(CHANNEL, sender);
    const tool = createMessageSend({ honeypot });
    expect(await send({ channel: CHANNEL, to: "u1", recipient_type: "user", template: "greeting" }, tool)).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: 'template "greeting": missing value for {name}' },
    });
    expect(await send({ channel: CHANNEL, to: "u1", recipient_type: "user", template: "greeting", vars: { name: "x.com" } }, tool)).toEqual(
      {
        ok: false,
        error: { code: "tool.input_invalid", message: 'template "greeting": the value of {name} contains a link' },
      },
    );
    expect(sent).toEqual([]);
  });
});

describe("message.send: exactly one of text or template", () => {
  const base = { channel: CHANNEL, to: "u1", recipient_type: "user" };

  it("text and template together → tool.input_invalid", async () => {
    expect(await send({ ...base, text: "hi", template: "greeting" })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: 'input: give exactly one of "text" or "template", not both' },
    });
  });

  it("neither → tool.input_invalid", async () => {
    expect(await send(base)).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: 'input: give exactly one of "text" or "template"' },
    });
  });

  it("vars without a template → tool.input_invalid naming vars", async () => {
    expect(await send({ ...base, text: "hi", vars: { name: "Ana" } })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: 'vars: only allowed with "template"' },
    });
  });

  it("more than 20 vars → tool.input_invalid", async () => {
    const vars = Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`v${i}`, "x"]));
    expect(await send({ ...base, template: "greeting", vars })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: "vars: at most 20 vars" },
    });
  });

  it("honeypotArgs gives the gate parsed arguments, or null for invalid input", () => {
    expect(honeypotArgs({ ...base, template: "greeting", vars: { name: "Ana" } })).toEqual({
      ...base,
      template: "greeting",
      vars: { name: "Ana" },
    });
    expect(honeypotArgs({ ...base, text: "hi", template: "greeting" })).toBeNull();
  });
});

describe("S1 §3.4 tool failures: one code, an actionable message, no adapter error text", () => {
  const input = { channel: CHANNEL, to: "u1", recipient_type: "user", text: "hi" };

  it("an adapter that throws → internal.error without its text", async () => {
    channelSenders.register(
      CHANNEL,
      fakeSender(async () => {
        throw new Error("401 from api.test: token sk-secret-123\n    at send (adapter.ts:10:5)");
      }).sender,
    );
    const outcome = await send(input);
    expect(outcome).toEqual({
      ok: false,
      error: {
        code: "internal.error",
        message: `the "${CHANNEL}" adapter could not send the message; it may not have been delivered, so check before sending again`,
      },
    });
    expect(JSON.stringify(outcome)).not.toMatch(/sk-secret|401|adapter\.ts|at send/);
  });

  it("an adapter that answers without a message id → internal.error", async () => {
    channelSenders.register(CHANNEL, fakeSender(async () => ({}) as { messageId: string }).sender);
    expect(await send(input)).toEqual({
      ok: false,
      error: {
        code: "internal.error",
        message: `the "${CHANNEL}" adapter returned no message id; the message may have been delivered, so check before sending again`,
      },
    });
  });

  it("a call whose signal fires while sending → timeout, not retryable", async () => {
    const controller = new AbortController();
    channelSenders.register(
      CHANNEL,
      fakeSender(() => {
        controller.abort();
        return new Promise(() => {});
      }).sender,
    );
    expect(await send(input, messageSend, ctx("sender", controller.signal))).toEqual({
      ok: false,
      error: {
        code: "timeout",
        message:
          "message.send did not finish within 30000 ms or was cancelled; the message may have been delivered, so check before sending again",
      },
    });
  });
});

describe("channelSenders registry", () => {
  it("registers, looks up and unregisters by channel; same sender twice is a no-op, another one throws", () => {
    const registry = new ChannelSenderRegistry();
    const a = fakeSender().sender;
    const b = fakeSender().sender;
    registry.register("telegram", a).register("telegram", a);
    expect(registry.get("telegram")).toBe(a);
    expect(() => registry.register("telegram", b)).toThrow('channel "telegram" already has a sender');
    expect(() => registry.register("Bad Name", b)).toThrow('invalid channel name "Bad Name"');
    expect(registry.channels()).toEqual(["telegram"]);
    registry.unregister("telegram");
    expect(registry.get("telegram")).toBeUndefined();
  });
});

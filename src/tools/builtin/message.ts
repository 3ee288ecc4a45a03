/**
 * `message.send` (DESIGN "Tool names": `side_effect`): sends a message through
 * a channel adapter registered in `channelSenders`. As a side effect it needs
 * the gate and an approval (S1 §3.3 Phase 1), unless the gate finds it
 * qualifies for the honeypot exception (`checkHoneypot`, Phase 2), which only
 * a templated message can.
 *
 * The message is either free `text` or a `template` id with `vars`, never
 * both. Templates come from the honeypot config the tool was created with; the
 * default instance has none, so it sends text only. With a honeypot config,
 * every delivered templated message is counted toward the honeypot rate
 * limits (`recordHoneypotSend`) — approved ones too, since the handler cannot
 * tell them apart, which only makes the limits stricter.
 *
 * Failures follow S1 §3.4: one code, an actionable message, and never the
 * adapter's own error text (it may hold tokens, URLs or stack traces).
 */
import { z } from "zod";
import { CHANNEL_NAME, channelSenders } from "../../channels/outbound";
import { sanitize } from "../../prompts/leak-guard/invisible";
import { checkOutput } from "../../prompts/output-guard";
import { WITHHELD_ERROR } from "../../prompts/tool-args-guard";
import "../../channels/senders";
import { type HoneypotConfig, MAX_VAR_CHARS, PLACEHOLDER_NAME, RECIPIENT_TYPES, TemplateId } from "../../config/honeypot";
import { honeypotRecipient, recordHoneypotSend, renderTemplate } from "../honeypot";
import { defineTool, type ToolDefinition, type ToolOutcome } from "../registry";
import { ABORTED, untilAborted } from "./common";

export const MAX_TEXT_CHARS = 4000;
export const MAX_VARS = 20;
export const MAX_ATTACHMENTS = 10;

const Attachment = z.strictObject({
  name: z.string().min(1).max(256).describe("File name shown to the recipient"),
  url: z
    .string()
    .max(2048)
    .regex(/^https:\/\/\S+$/, "must be an https:// URL")
    .describe("https:// URL the channel fetches the file from"),
});

export const MessageSendInput = z
  .strictObject({
    channel: z
      .string()
      .regex(CHANNEL_NAME, "must be a channel name such as telegram")
      .describe("Channel to send through, e.g. telegram or slack"),
    to: z.string().min(1).max(256).describe("Recipient on that channel: a user, group or channel id, or an email address"),
    recipient_type: z.enum(RECIPIENT_TYPES).describe("What kind of recipient `to` is"),
    text: z.string().min(1).max(MAX_TEXT_CHARS).optional().describe("The message text (give text or template, not both)"),
    template: TemplateId.optional().describe("Id of a configured message template (give text or template, not both)"),
    vars: z
      .record(z.string().regex(PLACEHOLDER_NAME, "must be a placeholder name"), z.string().max(MAX_VAR_CHARS))
      .refine((vars) => Object.keys(vars).length <= MAX_VARS, `at most ${MAX_VARS} vars`)
      .meta({ maxProperties: MAX_VARS })
      .optional()
      .describe("Values for the template's {name} placeholders: each placeholder exactly once, at most 200 characters each"),
    attachments: z.array(Attachment).max(MAX_ATTACHMENTS).optional().describe("Files to attach (at most 10)"),
  })
  .superRefine((input, ctx) => {
    if (input.text !== undefined && input.template !== undefined)
      ctx.addIssue({ code: "custom", path: [], message: 'give exactly one of "text" or "template", not both' });
    else if (input.text === undefined && input.template === undefined)
      ctx.addIssue({ code: "custom", path: [], message: 'give exactly one of "text" or "template"' });
    if (input.vars !== undefined && input.template === undefined)
      ctx.addIssue({ code: "custom", path: ["vars"], message: 'only allowed with "template"' });
  });
export type MessageSendArgs = z.output<typeof MessageSendInput>;

/** A call's input as `message.send` arguments (for the gate's honeypot check), or null if it is not valid input. */
export function honeypotArgs(input: Record<string, unknown>): MessageSendArgs | null {
  const parsed = MessageSendInput.safeParse(input);
  return parsed.success ? parsed.data : null;
}

const invalid = (message: string): ToolOutcome => ({ ok: false, error: { code: "tool.input_invalid", message } });

/** `message.send`, with its templates (the honeypot config) and clock injectable. */
export function createMessageSend(options: { honeypot?: HoneypotConfig; now?: () => Date } = {}): ToolDefinition {
  const now = options.now ?? (() => new Date());
  return defineTool({
    name: "message.send",
    description:
      "Send a message to a user, group, channel or email address through a configured channel. Give either text or a template id with vars. Sending usually needs a person's approval first.",
    input: MessageSendInput,
    risk: "side_effect",
    handler: async (input, ctx) => {
      const sender = channelSenders.get(input.channel);
      if (!sender)
        return {
          ok: false,
          error: { code: "invalid.request", message: `no adapter for channel "${input.channel}" is configured, so nothing was sent` },
        };

      // The configuration in force (passed by the run) wins over the one the tool was created with.
      const honeypot = ctx.honeypot ?? options.honeypot;
      const templates = honeypot?.templates ?? {};
      let text: string;
      if (input.template !== undefined) {
        const template = Object.hasOwn(templates, input.template) ? templates[input.template] : undefined;
        if (template === undefined) return invalid(`no template "${input.template}" is configured; send text instead`);
        const rendered = renderTemplate(template, input.vars ?? {});
        if (!rendered.ok) return invalid(`template "${input.template}": ${rendered.reason}`);
        text = rendered.text;
      } else {
        text = input.text ?? "";
      }
      // Issue 33: characters no reader sees never leave (emoji and script sequences are kept).
      text = sanitize(text);
      // Issue 20 §2: a message that carries hidden-layer text is never sent (defence in depth behind the engine).
      if (checkOutput(text).blocked) return { ok: false, error: { ...WITHHELD_ERROR } };
      // S1 §4.3: the exact text handed to the adapter is hashed by the run, whether or not delivery is confirmed.
      ctx.rendered?.(text);

      let sent: { messageId: string } | typeof ABORTED;
      try {
        sent = await untilAborted(
          sender.send(
            { to: input.to, recipientType: input.recipient_type, text, attachments: input.attachments ?? [] },
            {
              agentId: ctx.agentId,
              signal: ctx.signal,
              env: ctx.env,
              apiBaseUrl: ctx.channelApis?.[input.channel],
              secretOrigins: ctx.secretOrigins,
            },
          ),
          ctx.signal,
        );
      } catch {
        return {
          ok: false,
          error: {
            code: "internal.error",
            message: `the "${input.channel}" adapter could not send the message; it may not have been delivered, so check before sending again`,
          },
        };
      }
      if (sent === ABORTED)
        return {
          ok: false,
          error: {
            code: "timeout",
            message: `message.send did not finish within ${ctx.timeoutMs} ms or was cancelled; the message may have been delivered, so check before sending again`,
          },
        };
      if (typeof sent?.messageId !== "string" || sent.messageId === "")
        return {
          ok: false,
          error: {
            code: "internal.error",
            message: `the "${input.channel}" adapter returned no message id; the message may have been delivered, so check before sending again`,
          },
        };

      // A send the gate let through as a honeypot exception was counted when it reserved its place (issue 20 §4).
      if (honeypot && input.template !== undefined && !ctx.honeypotReserved) {
        // Delivered: a failure to count it must not turn a sent message into an error the model would retry.
        await recordHoneypotSend(ctx.env.DB, ctx.agentId, honeypotRecipient(input), now()).catch(() => {});
      }
      return {
        ok: true,
        output: { channel: input.channel, to: input.to, message_id: sent.messageId },
        summary: `sent to ${input.recipient_type} ${input.to} via ${input.channel}`,
      };
    },
  });
}

/** The registered instance: no templates, so text only (the config wiring may replace it). */
export const messageSend: ToolDefinition = createMessageSend();

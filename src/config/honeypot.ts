/**
 * The honeypot's configuration (`agents.<id>.tools.honeypot`, S1 §3.3 Phase 2): the allowlisted templates, recipient
 * types and hourly limits, with the rules their ids and placeholders follow. Here, in the configuration, so the
 * schema imports no tool module; the honeypot itself (src/tools/honeypot.ts) and `message.send` read them from here.
 */
import { z } from "zod";

/** Template ids: lower-case, as config keys. */
export const TEMPLATE_ID = /^[a-z][a-z0-9_-]{0,63}$/;
/** A `{name}` placeholder's name (and so a `vars` key). */
export const PLACEHOLDER_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** The longest value one placeholder may take, in characters. */
export const MAX_VAR_CHARS = 200;
export const RECIPIENT_TYPES = ["user", "group", "channel", "email"] as const;
export type RecipientType = (typeof RECIPIENT_TYPES)[number];

export const TemplateId = z.string().regex(TEMPLATE_ID, "must be a template id such as welcome (a-z, 0-9, _ and -)");

export const HoneypotConfig = z.strictObject({
  /** Allowlisted templates by id: texts with `{name}` placeholders. */
  templates: z.record(TemplateId, z.string().min(1).max(2000)).default({}),
  /** Recipient types a honeypot send may go to. */
  recipientTypes: z.array(z.enum(RECIPIENT_TYPES)).default([]),
  /** Most honeypot sends by one agent to one recipient in any hour. */
  perRecipientPerHour: z.int().min(0).max(10000).default(3),
  /** Most honeypot sends by one agent in any hour. */
  perAgentPerHour: z.int().min(0).max(100000).default(30),
});
export type HoneypotConfig = z.output<typeof HoneypotConfig>;

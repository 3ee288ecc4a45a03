/**
 * `email.draft` (DESIGN "Tool names": `draft_only`, for S1 §3.3's approval
 * rules): prepares an email for a human to review. It stores the draft as JSON
 * in the AUDIT bucket at `agents/{agentId}/drafts/{YYYY-MM-DD}/{draft_id}.json`
 * (UTC date of `created_at`) and never sends anything. Writes are create-only:
 * an existing object is never overwritten; a taken id is retried with a new one.
 */
import { z } from "zod";
import { checkOutput } from "../../prompts/output-guard";
import { WITHHELD_ERROR } from "../../prompts/tool-args-guard";
import { AGENT_ID } from "../../sessions/keys";
import { defineTool, type ToolDefinition } from "../registry";
import { ABORTED, timedOut, untilAborted, utf8Bytes } from "./common";

export const MAX_RECIPIENTS = 20;
export const MAX_SUBJECT_CHARS = 200;
/** The most UTF-8 bytes a draft's body may have (100 KB). */
export const MAX_BODY_BYTES = 100_000;
/** New ids tried before giving up when `draft_id`s keep colliding (they should never collide once). */
const ID_ATTEMPTS = 3;

/**
 * Loose email check: `local@domain.tld` without spaces, `@`, or the characters
 * that would let one string name several recipients or carry a header (`<>,;:"`).
 */
const LOOSE_EMAIL = /^[^\s@<>,;:"]+@[^\s@<>,;:".]+(\.[^\s@<>,;:".]+)+$/;

const Address = z.string().max(254).regex(LOOSE_EMAIL, "must be an email address such as name@example.com");

const EmailDraftInput = z.strictObject({
  to: z.array(Address).min(1).max(MAX_RECIPIENTS).describe("Recipient email addresses (1 to 20)"),
  subject: z
    .string()
    .max(MAX_SUBJECT_CHARS)
    .regex(/^[^\r\n]*$/, "must be one line")
    .describe("Subject line, one line of at most 200 characters"),
  body: z.string().max(MAX_BODY_BYTES).describe("Plain-text body, at most 100 KB of UTF-8"),
  cc: z.array(Address).max(MAX_RECIPIENTS).optional().describe("Carbon-copy email addresses (at most 20)"),
});

/** The stored draft, exactly as written to AUDIT. */
export interface EmailDraft {
  draft_id: string;
  run_id: string;
  agent_id: string;
  created_at: string;
  to: string[];
  cc: string[];
  subject: string;
  body: string;
}

/**
 * The draft as the recipient would read it, the text S1 §4.3 hashes: `To:`, `Cc:` (when there is one) and
 * `Subject:` header lines, a blank line, then the body, joined by "\n".
 */
export function renderDraftText(draft: Pick<EmailDraft, "to" | "cc" | "subject" | "body">): string {
  const headers = [
    `To: ${draft.to.join(", ")}`,
    ...(draft.cc.length > 0 ? [`Cc: ${draft.cc.join(", ")}`] : []),
    `Subject: ${draft.subject}`,
  ];
  return `${headers.join("\n")}\n\n${draft.body}`;
}

/** `drf_` and 24 random hex digits (96 bits). */
export function newDraftId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `drf_${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** Where a draft is stored in AUDIT. */
export function draftKey(agentId: string, createdAt: string, draftId: string): string {
  return `agents/${agentId}/drafts/${createdAt.slice(0, 10)}/${draftId}.json`;
}

/** `email.draft`, with its id source and clock injectable for tests. */
export function createEmailDraft(options: { newId?: () => string; now?: () => Date } = {}): ToolDefinition {
  const newId = options.newId ?? newDraftId;
  const now = options.now ?? (() => new Date());
  return defineTool({
    name: "email.draft",
    description:
      "Prepare an email draft for a person to review and send. The draft is stored and its draft_id returned; nothing is sent to anyone.",
    input: EmailDraftInput,
    risk: "draft_only",
    handler: async (input, ctx) => {
      if (!AGENT_ID.test(ctx.agentId)) return { ok: false, error: { code: "policy.denied", message: "this agent cannot store drafts" } };
      // Issue 20 §2: a draft that carries hidden-layer text is never stored (defence in depth behind the engine).
      if (checkOutput(`${input.subject}\n${input.body}`).blocked) return { ok: false, error: { ...WITHHELD_ERROR } };
      const bodyBytes = utf8Bytes(input.body);
      if (bodyBytes > MAX_BODY_BYTES)
        return { ok: false, error: { code: "tool.input_invalid", message: `body is longer than ${MAX_BODY_BYTES} bytes (100 KB)` } };

      const createdAt = now().toISOString();
      for (let attempt = 0; attempt < ID_ATTEMPTS; attempt++) {
        const draft: EmailDraft = {
          draft_id: newId(),
          run_id: ctx.runId,
          agent_id: ctx.agentId,
          created_at: createdAt,
          to: input.to,
          cc: input.cc ?? [],
          subject: input.subject,
          body: input.body,
        };
        const key = draftKey(ctx.agentId, createdAt, draft.draft_id);
        const stored = await untilAborted(
          ctx.env.AUDIT.put(key, JSON.stringify(draft), {
            onlyIf: { etagDoesNotMatch: "*" },
            httpMetadata: { contentType: "application/json" },
          }),
          ctx.signal,
        );
        if (stored === ABORTED) return timedOut("email.draft", ctx);
        if (!stored) continue;
        ctx.rendered?.(renderDraftText(draft));
        const recipients = draft.to.length + draft.cc.length;
        return {
          ok: true,
          output: { draft_id: draft.draft_id, key },
          summary: `stored draft ${draft.draft_id} for ${recipients} ${recipients === 1 ? "recipient" : "recipients"}; nothing was sent`,
        };
      }
      return {
        ok: false,
        error: { code: "internal.error", message: "the draft could not be stored: every new draft id was already taken", retryable: true },
      };
    },
  });
}

export const emailDraft: ToolDefinition = createEmailDraft();

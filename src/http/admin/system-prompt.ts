/**
 * The session's inline system prompt (S5 `session.system_prompt`; DESIGN "S5's session.system_prompt override"):
 *   GET    /api/admin/sessions/{session_id}/system-prompt   the inline L2 set for that generation (null: none)
 *   PUT    /api/admin/sessions/{session_id}/system-prompt   {system_prompt} → sets it; the next model call uses it
 *   DELETE /api/admin/sessions/{session_id}/system-prompt   clears it; the agent's role file is L2 again
 * It replaces L2 only: L1, L3, L4 (and the mode's L5) stay, and the output guard treats it as hidden text.
 * Stored in the SessionDO for that one generation (a `/new` starts without it); set and cleared are audited
 * with the text's hash and size, never the text.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { GatewayError } from "../../errors";
import { MAX_INLINE_ROLE_CHARS } from "../../prompts/assemble";
import { redactText, secretValuesFromEnv } from "../../security/redact";
import { SESSION_ID } from "../../sessions/keys";
import type { SessionDO, StoredSystemPrompt, SystemPromptAnswer } from "../../sessions/SessionDO";
import { requireJsonBody } from "../middleware/json-body";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { sessionById } from "../session-by-id";

const json = (schema: z.ZodType) => ({ "application/json": { schema } });
const SessionParam = z.object({ session_id: z.string().regex(SESSION_ID, "a session id (ses_…)") });

const SystemPrompt = z
  .object({
    session_id: z.string(),
    system_prompt: z.string().nullable().openapi({ description: "The inline L2; null when none is set" }),
    sha256: z.string().nullable(),
    bytes: z.int().nullable(),
    set_at: z.string().nullable(),
  })
  .openapi("SessionSystemPrompt");

const SystemPromptRequest = z
  .strictObject({
    system_prompt: z
      .string()
      .min(1)
      .max(MAX_INLINE_ROLE_CHARS)
      .openapi({ description: `Replaces L2 (the agent role) only; at most ${MAX_INLINE_ROLE_CHARS} characters` }),
  })
  .openapi("SessionSystemPromptRequest");

const errors = {
  401: { description: "Missing or invalid token", content: json(ErrorEnvelope) },
  403: { description: "Not the admin token", content: json(ErrorEnvelope) },
  404: { description: "No such session", content: json(ErrorEnvelope) },
  410: { description: "That generation was archived (/new): only the current one can be changed", content: json(ErrorEnvelope) },
};

const getRoute = createRoute({
  method: "get",
  path: "/sessions/{session_id}/system-prompt",
  summary: "The session's inline system prompt (S5 session.system_prompt), if set",
  request: { params: SessionParam },
  responses: { 200: { description: "The inline L2 (nulls when none)", content: json(SystemPrompt) }, ...errors },
});

const putRoute = createRoute({
  method: "put",
  path: "/sessions/{session_id}/system-prompt",
  summary: "Set the session's inline system prompt: it replaces L2 only, from the next model call",
  description:
    "L1, L3 and L4 are never replaced; the manifest shows L2 `id: inline, source: inline`. The text is treated as hidden: a reply or tool argument reproducing it is refused like any hidden layer. " +
    "A text carrying a credential or control characters is refused (400). Audited as `session.system_prompt_set` with its sha256 and size.",
  middleware: [requireJsonBody] as const,
  request: { params: SessionParam, body: { required: true, content: { "application/json": { schema: SystemPromptRequest } } } },
  responses: {
    200: { description: "Set", content: json(SystemPrompt) },
    400: { description: "Invalid body", content: json(ErrorEnvelope) },
    ...errors,
  },
});

const deleteRoute = createRoute({
  method: "delete",
  path: "/sessions/{session_id}/system-prompt",
  summary: "Clear the session's inline system prompt: the agent's role file is L2 again",
  description: "Idempotent. Audited as `session.system_prompt_cleared` (with the cleared text's sha256) when one was set.",
  request: { params: SessionParam },
  responses: { 200: { description: "Cleared (nulls)", content: json(SystemPrompt) }, ...errors },
});

/** Whether `text` has control characters other than tab, newline and carriage return. */
function hasControl(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if ((code < 0x20 && code !== 0x09 && code !== 0x0a && code !== 0x0d) || code === 0x7f) return true;
  }
  return false;
}

/** Refuses a prompt that would put a credential or control characters into every provider request. */
function validate(text: string, env: Env): void {
  if (hasControl(text)) throw new GatewayError("invalid.request", "system_prompt contains control characters; remove them");
  if (redactText(text, secretValuesFromEnv(env)) !== text)
    throw new GatewayError(
      "invalid.request",
      "system_prompt contains a credential (a configured secret or a key-shaped value); prompts are sent to the provider, so remove it",
    );
}

function view(sessionId: string, p: StoredSystemPrompt | null): z.infer<typeof SystemPrompt> {
  return {
    session_id: sessionId,
    system_prompt: p?.text ?? null,
    sha256: p?.sha256 ?? null,
    bytes: p?.bytes ?? null,
    set_at: p?.set_at ?? null,
  };
}

/** Runs `op` on the session's object; unknown → 404, an archived generation → 410. */
async function onSession(
  c: Context<AppEnv>,
  sessionId: string,
  op: (stub: DurableObjectStub<SessionDO>, identity: { sessionKey: string; agentId: string }) => Promise<unknown>,
) {
  const { stub, sessionKey, agentId } = await sessionById(c.env, sessionId);
  const answer = (await op(stub, { sessionKey, agentId })) as SystemPromptAnswer;
  if (!answer.ok) throw new GatewayError("gone", `session ${sessionId} was archived; set the prompt on the current generation`);
  return view(sessionId, answer.prompt);
}

/** Admin routes for a session's inline system prompt. */
export function adminSystemPromptRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  app.openapi(getRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    return c.json(await onSession(c, session_id, (stub, id) => stub.systemPrompt(id, session_id)), 200);
  });
  app.openapi(putRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    const { system_prompt } = c.req.valid("json");
    validate(system_prompt, c.env);
    return c.json(await onSession(c, session_id, (stub, id) => stub.setSystemPrompt(id, session_id, system_prompt)), 200);
  });
  app.openapi(deleteRoute, async (c) => {
    const { session_id } = c.req.valid("param");
    return c.json(await onSession(c, session_id, (stub, id) => stub.setSystemPrompt(id, session_id, null)), 200);
  });
  return app;
}

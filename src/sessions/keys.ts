/**
 * Session keys (S1 §5.1, DESIGN "Session keys") — a stable contract.
 *
 *   agent:{agentId}:main
 *   agent:{agentId}:{channel}:{accountId}:{scope}:{peerId}     scope ∈ dm | group | run | job
 *   agent:{agentId}:http:{callerId}~{roomId}:dm:{userId}       an HTTP chat (POST /v1/chat/messages)
 *
 * A key names one conversation and so one SessionDO: `sessionObjectName(key)`
 * is the only mapping from keys to Durable Objects. Changing it orphans every
 * existing session, so it needs a migration (S1 §5.2 "must not change without
 * migration").
 */

export const SESSION_SCOPES = ["dm", "group", "run", "job"] as const;
export type SessionScope = (typeof SESSION_SCOPES)[number];

export type SessionKey =
  | { kind: "main"; agentId: string }
  | { kind: "scoped"; agentId: string; channel: string; accountId: string; scope: SessionScope; peerId: string };

export type SessionKeyResult = { ok: true; key: SessionKey } | { ok: false; error: string };

/** Agent ids appear inside session keys, so they exclude `:` (config validates them with this too). */
export const AGENT_ID = /^[a-z0-9][a-z0-9_-]{0,63}$/;
const CHANNEL = /^[a-z][a-z0-9_-]{0,31}$/;
/** Account and peer ids: platform ids, phone numbers (+1555…), emails, room names — anything but ':' and spaces. */
export const KEY_PART = /^[A-Za-z0-9+._@=-]{1,128}$/;
/**
 * The account id of an HTTP chat: `{callerId}~{roomId}` (DESIGN "Session keys"). `~` is in neither a caller id
 * (src/http/middleware/auth.ts, letters, digits, `_ . -`) nor a KEY_PART, so the pair is read back unambiguously, and no key
 * minted before callers were part of it (a plain KEY_PART) can ever equal one minted after.
 */
const HTTP_CHAT_ACCOUNT = /^[A-Za-z0-9_.-]{1,64}~[A-Za-z0-9+._@=-]{1,128}$/;
/** A generation id, as minted by the SessionDO. */
export const SESSION_ID = /^ses_[0-9a-f]{32}$/;
const MAX_KEY_LENGTH = 512;

/** Parses and validates a session key; the error says which part is wrong. */
export function parseSessionKey(text: string): SessionKeyResult {
  if (text.length > MAX_KEY_LENGTH) return { ok: false, error: `session key longer than ${MAX_KEY_LENGTH} characters` };
  const parts = text.split(":");
  if (parts[0] !== "agent") return { ok: false, error: 'session key must start with "agent:"' };
  const agentId = parts[1] ?? "";
  if (!AGENT_ID.test(agentId)) return { ok: false, error: `invalid agent id "${agentId}" in session key` };
  if (parts.length === 3 && parts[2] === "main") return { ok: true, key: { kind: "main", agentId } };
  if (parts.length !== 6) {
    return { ok: false, error: "session key must be agent:{agentId}:main or agent:{agentId}:{channel}:{accountId}:{scope}:{peerId}" };
  }
  const [, , channel = "", accountId = "", scope = "", peerId = ""] = parts;
  if (!CHANNEL.test(channel)) return { ok: false, error: `invalid channel "${channel}" in session key` };
  if (!KEY_PART.test(accountId) && !(channel === "http" && HTTP_CHAT_ACCOUNT.test(accountId))) {
    return { ok: false, error: "invalid account id in session key" };
  }
  if (!(SESSION_SCOPES as readonly string[]).includes(scope)) {
    return { ok: false, error: `invalid scope "${scope}" in session key (expected ${SESSION_SCOPES.join(", ")})` };
  }
  if (!KEY_PART.test(peerId)) return { ok: false, error: "invalid peer id in session key" };
  return { ok: true, key: { kind: "scoped", agentId, channel, accountId, scope: scope as SessionScope, peerId } };
}

/** The canonical text of a key. `parseSessionKey(formatSessionKey(k))` gives `k` back. */
export function formatSessionKey(key: SessionKey): string {
  if (key.kind === "main") return `agent:${key.agentId}:main`;
  return `agent:${key.agentId}:${key.channel}:${key.accountId}:${key.scope}:${key.peerId}`;
}

/**
 * The Durable Object name of a session: its canonical key text, used with
 * `env.SESSIONS.getByName()`. THE contract between keys and objects.
 */
export function sessionObjectName(key: SessionKey): string {
  return formatSessionKey(key);
}

/**
 * The session of an HTTP chat (S3 §5, DESIGN "Session keys"): channel `http`, account = `{callerId}~{roomId}`,
 * peer = user. The caller is part of the key, so two API callers who send the same room and user ids never share
 * a conversation, and `/new` / `/resume` only ever act on the caller's own.
 */
export function httpChatSessionKey(agentId: string, callerId: string, roomId: string, userId: string): SessionKeyResult {
  return parseSessionKey(`agent:${agentId}:http:${callerId}~${roomId}:dm:${userId}`);
}

/** The caller and room of an HTTP chat account id; null for any other account id (a legacy room-only key included). */
export function httpChatAccount(accountId: string): { callerId: string; roomId: string } | null {
  if (!HTTP_CHAT_ACCOUNT.test(accountId)) return null;
  const at = accountId.indexOf("~");
  return { callerId: accountId.slice(0, at), roomId: accountId.slice(at + 1) };
}

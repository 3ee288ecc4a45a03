/**
 * Session keys (S1 §5.1, DESIGN "Session keys"): the grammar, its errors, the
 * round trip, and the one key → Durable Object mapping.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { formatSessionKey, httpChatAccount, httpChatSessionKey, parseSessionKey, sessionObjectName } from "../../src/sessions/keys";

describe("session key grammar", () => {
  it("US-SESSION-001 S1 §5.1's examples parse", () => {
    expect(parseSessionKey("agent:main:telegram:123456789:dm:987654321")).toEqual({
      ok: true,
      key: { kind: "scoped", agentId: "main", channel: "telegram", accountId: "123456789", scope: "dm", peerId: "987654321" },
    });
    expect(parseSessionKey("agent:main:whatsapp:+15551234567:dm:+15559876543")).toEqual({
      ok: true,
      key: { kind: "scoped", agentId: "main", channel: "whatsapp", accountId: "+15551234567", scope: "dm", peerId: "+15559876543" },
    });
  });

  it("the main session and the group, run and job scopes parse", () => {
    expect(parseSessionKey("agent:main:main")).toEqual({ ok: true, key: { kind: "main", agentId: "main" } });
    for (const scope of ["group", "run", "job"]) expect(parseSessionKey(`agent:reports:http:alice:${scope}:x_1`).ok).toBe(true);
  });

  const malformed: [string, string][] = [
    ["", 'session key must start with "agent:"'],
    ["session:main:main", 'session key must start with "agent:"'],
    ["agent:Main:main", 'invalid agent id "Main" in session key'],
    ["agent::main", 'invalid agent id "" in session key'],
    ["agent:main", "session key must be agent:{agentId}:main or agent:{agentId}:{channel}:{accountId}:{scope}:{peerId}"],
    ["agent:main:telegram:1:dm", "session key must be agent:{agentId}:main or agent:{agentId}:{channel}:{accountId}:{scope}:{peerId}"],
    ["agent:main:telegram:1:dm:2:3", "session key must be agent:{agentId}:main or agent:{agentId}:{channel}:{accountId}:{scope}:{peerId}"],
    ["agent:main:Tele gram:1:dm:2", 'invalid channel "Tele gram" in session key'],
    ["agent:main:telegram::dm:2", "invalid account id in session key"],
    ["agent:main:telegram:1:channel:2", 'invalid scope "channel" in session key (expected dm, group, run, job)'],
    ["agent:main:telegram:1:dm:", "invalid peer id in session key"],
    ["agent:main:telegram:1:dm:a b", "invalid peer id in session key"],
    [`agent:main:telegram:1:dm:${"x".repeat(600)}`, "session key longer than 512 characters"],
  ];
  for (const [key, error] of malformed) {
    it(`malformed ${JSON.stringify(key.slice(0, 40))} → ${error}`, () => {
      expect(parseSessionKey(key)).toEqual({ ok: false, error });
    });
  }

  it("formatting round-trips", () => {
    for (const text of ["agent:main:main", "agent:main:telegram:123456789:dm:987654321", "agent:ops:slack:T0123:group:C0456"]) {
      const parsed = parseSessionKey(text);
      if (!parsed.ok) throw new Error(parsed.error);
      expect(formatSessionKey(parsed.key)).toBe(text);
    }
  });

  it('HTTP chat maps to agent:{agent_id}:http:{caller}~{room_id}:dm:{user_id} (S3 §5, DESIGN "Session keys")', () => {
    const r = httpChatSessionKey("main", "alice", "dev-room", "123456");
    if (!r.ok) throw new Error(r.error);
    expect(formatSessionKey(r.key)).toBe("agent:main:http:alice~dev-room:dm:123456");
    expect(httpChatSessionKey("main", "alice", "dev:room", "1")).toEqual({
      ok: false,
      error: "session key must be agent:{agentId}:main or agent:{agentId}:{channel}:{accountId}:{scope}:{peerId}",
    });
  });
});

describe("ISSUE20-§1 the HTTP chat key carries the caller, unambiguously", () => {
  // Caller ids are [A-Za-z0-9_.-]{1,64} (src/http/middleware/auth.ts), room ids KEY_PART; pairs built to collide under a
  // naive join: a separator-like character moved from the caller's end to the room's start, and the reverse.
  const pairs: [string, string][] = [
    ["alice", "lobby"],
    ["alice.x", "lobby"],
    ["alice", "x.lobby"],
    ["alice-", "lobby"],
    ["alice", "-lobby"],
    ["alice_", "lobby"],
    ["alice", "_lobby"],
    ["al", "ice@lobby"],
    ["alice", "@lobby"],
    ["bob", "alice@lobby"],
    ["a".repeat(64), "r".repeat(128)],
  ];

  it("ISSUE20-§1 no two (caller, room) pairs map to the same key, and each key reads back as its own pair", () => {
    const keys = pairs.map(([caller, roomId]) => {
      const r = httpChatSessionKey("main", caller, roomId, "u1");
      if (!r.ok) throw new Error(r.error);
      const text = formatSessionKey(r.key);
      expect(parseSessionKey(text)).toEqual(r);
      expect(r.key.kind === "scoped" && httpChatAccount(r.key.accountId)).toEqual({ callerId: caller, roomId });
      return text;
    });
    expect(new Set(keys).size).toBe(pairs.length);
  });

  it("ISSUE20-§1 the longest caller (64) with the longest room (128) still makes a valid key", () => {
    const r = httpChatSessionKey("main", "a".repeat(64), "r".repeat(128), "u".repeat(128));
    if (!r.ok) throw new Error(r.error);
    expect(formatSessionKey(r.key)).toBe(`agent:main:http:${"a".repeat(64)}~${"r".repeat(128)}:dm:${"u".repeat(128)}`);
  });

  it("ISSUE20-§1 no new key can equal a legacy room-only key: `~` is in no legacy account id, and only HTTP chat accepts it", () => {
    // A legacy key's account is a plain KEY_PART (no `~`): it reads as no caller at all.
    expect(httpChatAccount("alice@lobby")).toBeNull();
    expect(httpChatAccount("alice.lobby")).toBeNull();
    // A `~` account anywhere but channel http, or with a malformed caller part, is refused.
    expect(parseSessionKey("agent:main:telegram:alice~lobby:dm:u")).toEqual({ ok: false, error: "invalid account id in session key" });
    expect(parseSessionKey("agent:main:http:ali@ce~lobby:dm:u")).toEqual({ ok: false, error: "invalid account id in session key" });
    expect(parseSessionKey("agent:main:http:alice~lob~by:dm:u")).toEqual({ ok: false, error: "invalid account id in session key" });
    expect(parseSessionKey(`agent:main:http:${"a".repeat(65)}~lobby:dm:u`)).toEqual({
      ok: false,
      error: "invalid account id in session key",
    });
  });
});

describe("key → Durable Object mapping (a contract)", () => {
  it("the object name is the canonical key text, so the same key always reaches the same object", () => {
    const parsed = parseSessionKey("agent:main:telegram:123456789:dm:987654321");
    if (!parsed.ok) throw new Error(parsed.error);
    const name = sessionObjectName(parsed.key);
    expect(name).toBe("agent:main:telegram:123456789:dm:987654321");
    expect(env.SESSIONS.idFromName(name).toString()).toBe(env.SESSIONS.idFromName("agent:main:telegram:123456789:dm:987654321").toString());
  });
});

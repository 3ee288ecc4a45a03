/**
 * Issue 21 item 13: admins see every generation of a session key (GET /api/admin/chat/generations), current and
 * archived, with their session_ids, filterable like the sessions list and paged like every list.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { testConfig } from "../support/config";

const ALICE = "test-api-token-alice-0123456789";
const ADMIN = "test-admin-token-0123456789abcdef";
const app = createApp({ config: testConfig(), logger: createLogger("error") });

async function call(method: string, path: string, token: string, body?: unknown) {
  const res = await app.request(
    `https://gateway.test${path}`,
    {
      method,
      headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    },
    env,
  );
  return { status: res.status, body: (await res.json()) as Record<string, any> };
}

const room = () => `room-${crypto.randomUUID().slice(0, 8)}`;
/** A chat command (/new, /resume) answers at once with the generation's session_id. */
const chat = (r: string, message: string) =>
  call("POST", "/v1/chat/messages", ALICE, { user_id: "gen-user", room_id: r, agent_id: "main", message });

describe("ISSUE21-13 admins see every generation", () => {
  it("ISSUE21-13 /new twice → three generations listed, one current and two archived, and /resume flips their statuses", async () => {
    const r = room();
    const key = `agent:main:http:alice~${r}:dm:gen-user`;
    const started = await chat(r, "/new"); // creates the session, then starts its second generation
    const first = started.body.session_id as string;
    const original = /previous one \((ses_[0-9a-f]+)\)/.exec(started.body.response)?.[1] as string;
    expect(original).not.toBe(first);
    const third = (await chat(r, "/new")).body.session_id as string;
    const listed = await call("GET", `/api/admin/chat/generations?room_id=${r}`, ADMIN);
    expect(listed.status).toBe(200);
    const row = (session_id: string, status: string) => ({
      session_id,
      session_key: key,
      status,
      agent_id: "main",
      channel: "http",
      room_id: r,
      user_id: "gen-user",
      scope: "dm",
      started_at: expect.any(String),
    });
    expect(listed.body).toEqual({
      generations: [row(third, "current"), row(first, "archived"), row(original, "archived")],
      next_cursor: null,
    });
    // The sessions list keeps one row per key, pointing at the current generation.
    expect((await call("GET", `/api/admin/chat/sessions?room_id=${r}`, ADMIN)).body.sessions.map((s: any) => s.session_id)).toEqual([
      third,
    ]);

    expect((await chat(r, `/resume ${original}`)).body.session_id).toBe(original);
    const statuses = async (q: string) =>
      (await call("GET", `/api/admin/chat/generations?${q}`, ADMIN)).body.generations.map((g: any) => [g.session_id, g.status]);
    expect(await statuses(`session_key=${encodeURIComponent(key)}`)).toEqual([
      [third, "archived"],
      [first, "archived"],
      [original, "current"],
    ]);
    expect(await statuses(`room_id=${r}&status=archived`)).toEqual([
      [third, "archived"],
      [first, "archived"],
    ]);
    expect(await statuses(`room_id=${r}&user_id=gen-user&agent_id=main&channel=http&status=current`)).toEqual([[original, "current"]]);
    expect(await statuses(`room_id=${r}&channel=telegram`)).toEqual([]);
  });

  it("ISSUE21-13 the generations list pages like every list: limit, next_cursor, and refuses another list's cursor", async () => {
    const r = room();
    await chat(r, "/new");
    await chat(r, "/new");
    const all = (await call("GET", `/api/admin/chat/generations?room_id=${r}`, ADMIN)).body.generations.map((g: any) => g.session_id);
    expect(all).toHaveLength(3);
    const page1 = await call("GET", `/api/admin/chat/generations?room_id=${r}&limit=2`, ADMIN);
    expect(page1.body.generations.map((g: any) => g.session_id)).toEqual(all.slice(0, 2));
    const page2 = await call("GET", `/api/admin/chat/generations?room_id=${r}&limit=2&cursor=${page1.body.next_cursor}`, ADMIN);
    expect(page2.body).toEqual({ generations: [expect.objectContaining({ session_id: all[2] })], next_cursor: null });
    const sessionsCursor = (await call("GET", "/api/admin/chat/sessions?limit=1", ADMIN)).body.next_cursor;
    expect(await call("GET", `/api/admin/chat/generations?cursor=${sessionsCursor}`, ADMIN)).toEqual({
      status: 400,
      body: { error: { code: "invalid.request", message: "cursor is not valid for this list" } },
    });
  });

  it("ISSUE21-13 the generations list needs the admin scope", async () => {
    expect((await call("GET", "/api/admin/chat/generations", ALICE)).status).toBe(403);
  });
});

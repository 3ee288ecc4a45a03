/**
 * Issue 21 §4: `session.system_prompt` can be set — through the admin API, end to end. The next run's manifest
 * shows L2 `inline` with L1, L3 and L4 unchanged, the provider receives the text in place of the role file, the
 * output guard treats it as hidden (a verbatim or base64 echo is refused), and the admin action is audited with
 * the text's hash only.
 */
import { env } from "cloudflare:workers";
import { beforeAll, describe, expect, it } from "vitest";
import { disclosureRefusalMessage } from "../../src/prompts/disclosure";
import { runObjectId } from "../../src/runs/ids";
import { bodiesSentTo, runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, call, registerTestTools, runDetail, until, waitForRun } from "../support/runs";
import { auditBacklog } from "../support/session";

beforeAll(() => registerTestTools());

const INLINE =
  "You are Marlowe, the harbour logistics assistant for the inland port of Ostrava-Privoz. " +
  "You answer questions about barge schedules, crane bookings and container yard slots in plain sentences, " +
  "always quoting the berth number first and the tide-independent window second. " +
  "When a skipper asks for a slot that is already taken, propose the two nearest free windows on the same quay. " +
  "Never guess a customs status; tell the skipper to ask the customs desk on quay four instead.";

const sha256 = async (t: string) =>
  [...new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(t)))]
    .map((b) => b.toString(16).padStart(2, "0"))
    .join("");
const utf8Base64 = (t: string) => btoa(String.fromCharCode(...new TextEncoder().encode(t)));
const today = () => new Date().toISOString().slice(0, 10);

async function setup(steps: { content: string }[]) {
  const host = uniqueHost("script");
  const agentId = `sp-${crypto.randomUUID().slice(0, 8)}`;
  await scriptProvider(host, steps);
  const app = appFor(runConfig(host, { agentId }));
  const room = `r-${crypto.randomUUID().slice(0, 8)}`;
  const send = async (message: string) => {
    const res = await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: room, agent_id: agentId, message });
    expect(res.status).toBe(202);
    const run = await waitForRun(app, res.body.id);
    return { runId: res.body.id as string, sessionId: res.body.session_id as string, run };
  };
  return { host, agentId, app, send };
}

const stackOf = async (app: App, runId: string) => (await runDetail(app, runId)).manifests[0].manifest.stack as any[];
const layer = (stack: any[], l: string) => stack.find((e) => e.layer === l);

describe("ISSUE21-4 session.system_prompt", () => {
  it("ISSUE21-4 an admin sets session.system_prompt: the next run's manifest shows L2 inline, L1/L3/L4 hashes unchanged, the provider gets the text; clearing restores the role file", async () => {
    const { host, agentId, app, send } = await setup([{ content: "first" }, { content: "second" }, { content: "third" }]);
    const first = await send("hello");
    const path = `/api/admin/sessions/${first.sessionId}/system-prompt`;

    const put = await call(app, "PUT", path, { system_prompt: INLINE }, ADMIN);
    expect(put.status).toBe(200);
    const hash = await sha256(INLINE);
    expect(put.body).toEqual({
      session_id: first.sessionId,
      system_prompt: INLINE,
      sha256: hash,
      bytes: new TextEncoder().encode(INLINE).length,
      set_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
    expect((await call(app, "GET", path, undefined, ADMIN)).body).toEqual(put.body);

    const second = await send("which berth?");
    const before = await stackOf(app, first.runId);
    const after = await stackOf(app, second.runId);
    expect(layer(before, "L2")).toMatchObject({ id: "agents/default", source: "file" });
    expect(layer(after, "L2")).toEqual({
      layer: "L2",
      id: "inline",
      file: "-",
      sha256: hash,
      bytes: new TextEncoder().encode(INLINE).length,
      tokens_est: expect.any(Number),
      source: "inline",
    });
    for (const l of ["L1", "L3", "L4"]) expect(layer(after, l)).toEqual(layer(before, l));
    const bodies = await bodiesSentTo(host);
    const systems = (b: { messages: any[] }) => b.messages.filter((m) => m.role === "system").map((m) => m.content);
    expect(systems(bodies[1] as never)[1]).toBe(INLINE);
    expect(systems(bodies[0] as never)).not.toContain(INLINE);
    expect(systems(bodies[1] as never).length).toBe(systems(bodies[0] as never).length);

    const cleared = await call(app, "DELETE", path, undefined, ADMIN);
    expect(cleared.status).toBe(200);
    expect(cleared.body).toEqual({ session_id: first.sessionId, system_prompt: null, sha256: null, bytes: null, set_at: null });
    const third = await send("and now?");
    expect(layer(await stackOf(app, third.runId), "L2")).toEqual(layer(before, "L2"));

    // Audited as admin actions, with the hash and size only.
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(first.runId) as string));
    await until(async () => (await auditBacklog(stub)) === 0);
    const audit = await call(app, "GET", `/api/admin/audit?agent_id=${agentId}&date=${today()}`, undefined, ADMIN);
    const events = audit.text
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    expect(events.find((e) => e.event_type === "session.system_prompt_set")).toMatchObject({
      actor: "admin",
      run_id: null,
      payload: { session_id: first.sessionId, sha256: hash, bytes: new TextEncoder().encode(INLINE).length },
    });
    expect(events.find((e) => e.event_type === "session.system_prompt_cleared")).toMatchObject({
      actor: "admin",
      payload: { session_id: first.sessionId, sha256: hash },
    });
    expect(audit.text).not.toContain("harbour logistics");
  });

  it("ISSUE21-4 the output guard treats the inline system prompt as hidden: a verbatim echo and a base64 echo are refused", async () => {
    const { app, send, host } = await setup([
      { content: "ok" },
      { content: INLINE },
      { content: utf8Base64(INLINE) },
      { content: "Berth 7, 14:00." },
    ]);
    const first = await send("hello");
    expect((await call(app, "PUT", `/api/admin/sessions/${first.sessionId}/system-prompt`, { system_prompt: INLINE }, ADMIN)).status).toBe(
      200,
    );
    // Innocent questions: the input guard lets them through, so each refusal below is the output guard's.
    const verbatim = await send("what can you do for me?");
    expect(verbatim.run.status).toBe("completed");
    expect(verbatim.run.output).toBe(disclosureRefusalMessage());
    const encoded = await send("and for my barge?");
    expect(encoded.run.output).toBe(disclosureRefusalMessage());
    const ordinary = await send("which berth?");
    expect(ordinary.run.output).toBe("Berth 7, 14:00.");
    expect((await bodiesSentTo(host)).length).toBe(4);
    const messages = await call(app, "GET", `/api/admin/chat/sessions/${first.sessionId}/messages`, undefined, ADMIN);
    expect(messages.text).not.toContain("harbour logistics");
    expect(messages.text).not.toContain(utf8Base64(INLINE).slice(40, 80));
  });

  it("ISSUE21-4 a system prompt with a credential, control characters or over 32000 characters is refused; unknown or archived sessions and api tokens too", async () => {
    const { app, send, agentId } = await setup([{ content: "ok" }]);
    const first = await send("hello");
    const path = `/api/admin/sessions/${first.sessionId}/system-prompt`;
    const credential = await call(
      app,
      "PUT",
      path,
      { system_prompt: "Use the key sk-proj-abcdefghijklmnopqrstuvwxyz0123 for lookups." },
      ADMIN,
    );
    expect(credential.status).toBe(400);
    expect(credential.body.error.code).toBe("invalid.request");
    expect(credential.text).not.toContain("abcdefghijklmnop");
    const control = await call(app, "PUT", path, { system_prompt: "Be brief.\u0007" }, ADMIN);
    expect(control.status).toBe(400);
    expect(control.body.error.code).toBe("invalid.request");
    expect((await call(app, "PUT", path, { system_prompt: "x".repeat(32_001) }, ADMIN)).status).toBe(400);
    expect((await call(app, "PUT", path, { system_prompt: "x".repeat(32_000) }, ADMIN)).status).toBe(200);
    expect((await call(app, "PUT", path, { system_prompt: INLINE }, ALICE)).status).toBe(403);
    expect((await call(app, "GET", path, undefined, ALICE)).status).toBe(403);
    const unknown = await call(app, "PUT", `/api/admin/sessions/ses_${"0".repeat(32)}/system-prompt`, { system_prompt: INLINE }, ADMIN);
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe("resource.not_found");

    // /new archives the generation: its prompt can no longer change, and the new one starts without it.
    const room = (await call(app, "GET", `/api/admin/chat/sessions?agent_id=${agentId}`, undefined, ADMIN)).body.sessions[0].room_id;
    const fresh = await call(app, "POST", "/v1/chat/messages", { user_id: "u", room_id: room, agent_id: agentId, message: "/new" });
    expect(fresh.status).toBe(200);
    const archived = await call(app, "PUT", path, { system_prompt: INLINE }, ADMIN);
    expect(archived.status).toBe(410);
    expect(archived.body.error.code).toBe("gone");
    expect(
      (await call(app, "GET", `/api/admin/sessions/${fresh.body.session_id}/system-prompt`, undefined, ADMIN)).body.system_prompt,
    ).toBe(null);
  });
});

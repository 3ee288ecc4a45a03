/**
 * Issue 33 (D-087): an API key record's `caller_id` never silently equals a caller of GATEWAY_API_TOKENS, which
 * would merge two tenants' conversations, runs, budgets and limits. Creating or patching such a key is refused
 * (409 naming caller_id) unless the admin says `share_caller: true` — the documented move from GATEWAY_API_TOKENS
 * to key records —, which the record shows and the audit keeps. The other way round (an env token added later for
 * an existing key's caller), the key is refused (401, logged as `auth.key_refused` `caller_in_env`) until the
 * admin shares the caller on purpose or removes the entry; the env token keeps working.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { createApp } from "../../src/http/app";
import { createLogger } from "../../src/observability/logger";
import { runConfig, uniqueHost } from "../support/config";
import { ADMIN, ALICE, type App, appFor, BOB, call, readResponse, until } from "../support/runs";

const label = () => crypto.randomUUID().slice(0, 8);
const UNAUTHORIZED = { error: { code: "auth.unauthorized", message: "invalid bearer token" } };

const sharedCaller = (caller: string) =>
  `caller_id: "${caller}" is a caller of GATEWAY_API_TOKENS: a key acting as it would share that caller's runs, ` +
  "conversations, budgets and limits; send share_caller: true to share them on purpose (moving the caller to key " +
  "records), or choose another caller_id";

const keysOf = async (caller: string) =>
  (await env.DB.prepare("SELECT COUNT(*) AS n FROM api_keys WHERE caller_id = ?1").bind(caller).first<{ n: number }>())?.n;

/** A request with `bindings` as the Worker's env (another GATEWAY_API_TOKENS). */
async function request(app: App, method: string, path: string, token: string, bindings: object, body?: unknown) {
  const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const init = { method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }) };
  return readResponse(await app.request(`https://gateway.test${path}`, init, bindings));
}

/** The gateway audit events of one key, once `n` of them are shipped. */
async function keyAudit(app: App, keyId: string, n: number): Promise<any[]> {
  const read = async () => {
    const res = await call(app, "GET", `/api/admin/audit?agent_id=gateway&date=${new Date().toISOString().slice(0, 10)}`, undefined, ADMIN);
    if (res.status !== 200) return [];
    const events = res.text
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    return events.filter((e) => String(e.event_type).startsWith("api_key.") && e.payload.key_id === keyId);
  };
  await until(async () => (await read()).length === n, 15_000);
  return read();
}

describe("ISSUE33 callers: a key's caller_id and GATEWAY_API_TOKENS", () => {
  it("ISSUE33 callers: a key whose caller_id is a GATEWAY_API_TOKENS caller is refused with 409 naming caller_id; nothing stored", async () => {
    const app = appFor(runConfig(uniqueHost("ok")));
    for (const caller of ["alice", "bob"]) {
      const before = await keysOf(caller);
      for (const share_caller of [undefined, false]) {
        const res = await call(app, "POST", "/api/admin/keys", { caller_id: caller, label: "merge", agents: "all", share_caller }, ADMIN);
        expect({ status: res.status, body: res.body }).toEqual({
          status: 409,
          body: { error: { code: "conflict", message: sharedCaller(caller) } },
        });
      }
      expect(await keysOf(caller)).toBe(before);
    }
  });

  it("ISSUE33 callers: share_caller: true shares the caller on purpose: 201 showing it, audited, the key's runs are alice's", async () => {
    const app = appFor(runConfig(uniqueHost("ok")));
    const res = await call(
      app,
      "POST",
      "/api/admin/keys",
      { caller_id: "alice", label: "moving", agents: "all", share_caller: true },
      ADMIN,
    );
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ caller_id: "alice", share_caller: true });
    const listed = (await call(app, "GET", "/api/admin/keys?limit=200", undefined, ADMIN)).body.keys.find(
      (k: any) => k.key_id === res.body.key_id,
    );
    expect(listed.share_caller).toBe(true);

    const run = await call(app, "POST", "/v1/runs", { agent_id: "main", message: "hi" }, res.body.key);
    expect(run.status).toBe(202);
    // Alice's env token sees the key's run (bob's does not): one caller, on purpose.
    expect((await call(app, "GET", `/v1/runs/${run.body.id}`, undefined, ALICE)).status).toBe(200);
    expect((await call(app, "GET", `/v1/runs/${run.body.id}`, undefined, BOB)).status).toBe(404);

    const [created] = await keyAudit(app, res.body.key_id, 1);
    expect(created).toMatchObject({ event_type: "api_key.created", payload: { caller_id: "alice", share_caller: true } });
    // A key of a caller no env token names carries no share_caller field.
    const plain = await call(app, "POST", "/api/admin/keys", { caller_id: `own-${label()}`, label: "x", agents: "all" }, ADMIN);
    expect(plain.status).toBe(201);
    expect(plain.body).not.toHaveProperty("share_caller");
  });

  it("ISSUE33 callers: PATCH cannot take share_caller away while GATEWAY_API_TOKENS names the caller (409); other changes keep it", async () => {
    const app = appFor(runConfig(uniqueHost("ok")));
    const made = await call(app, "POST", "/api/admin/keys", { caller_id: "bob", label: "b", agents: "all", share_caller: true }, ADMIN);
    expect(made.status).toBe(201);
    const patch = (body: unknown) => call(app, "PATCH", `/api/admin/keys/${made.body.key_id}`, body, ADMIN);
    expect(await patch({ share_caller: false })).toMatchObject({
      status: 409,
      body: { error: { code: "conflict", message: sharedCaller("bob") } },
    });
    const relabelled = await patch({ label: "renamed" });
    expect(relabelled.status).toBe(200);
    expect(relabelled.body).toMatchObject({ label: "renamed", share_caller: true });
    expect(await patch({ share_caller: "yes" })).toMatchObject({ status: 400 });
  });

  it("ISSUE33 callers: an env token added after a key of its caller: the key is refused (401, logged), the env token works, until share_caller: true", async () => {
    const lines: string[] = [];
    const app = createApp({ config: runConfig(uniqueHost("ok")), logger: createLogger("info", (line) => lines.push(line)) });
    const caller = `erin-${label()}`;
    const made = await call(app, "POST", "/api/admin/keys", { caller_id: caller, label: "first", agents: "all" }, ADMIN);
    expect(made.status).toBe(201);
    expect((await call(app, "GET", "/v1/models", undefined, made.body.key)).status).toBe(200);

    const token = `erin-env-token-${label()}-0123456789`;
    const later = { ...env, GATEWAY_API_TOKENS: `${env.GATEWAY_API_TOKENS},${caller}:${token}` };
    expect(await request(app, "GET", "/v1/models", made.body.key, later)).toMatchObject({ status: 401, body: UNAUTHORIZED });
    const refusal = lines.map((l) => JSON.parse(l)).find((l) => l.event === "auth.key_refused");
    expect(refusal).toMatchObject({ level: "info", key_id: made.body.key_id, reason: "caller_in_env" });
    expect((await request(app, "GET", "/v1/models", token, later)).status).toBe(200);

    // Patching the key is refused the same way until the admin shares the caller on purpose.
    const path = `/api/admin/keys/${made.body.key_id}`;
    expect(await request(app, "PATCH", path, ADMIN, later, { label: "second" })).toMatchObject({
      status: 409,
      body: { error: { code: "conflict", message: sharedCaller(caller) } },
    });
    expect(await request(app, "PATCH", path, ADMIN, later, { share_caller: true })).toMatchObject({
      status: 200,
      body: { caller_id: caller, share_caller: true },
    });
    expect((await request(app, "GET", "/v1/models", made.body.key, later)).status).toBe(200);
  });
});

/**
 * The leak scan (S1 §4, DESIGN "Logging"): a full scenario with canary secrets — the provider key, a channel
 * secret, the admin token, an API token, a secret in a user message, a secret inside a tool output — and a
 * model that tries to repeat the base prompt. Afterwards every R2 object, every log line and every row of the
 * session's Durable Object storage is read back, and none of the canaries is found in any of them.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import { getBasePrompt } from "../../src/prompts/catalog";
import { runObjectId } from "../../src/runs/ids";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, ALICE, appFor, call, registerTestTools, until, waitForRun } from "../support/runs";
import { auditBacklog } from "../support/session";

registerTestTools();

async function everyObject(bucket: R2Bucket): Promise<{ key: string; text: string }[]> {
  const out: { key: string; text: string }[] = [];
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ ...(cursor ? { cursor } : {}) });
    for (const o of page.objects) out.push({ key: o.key, text: (await (await bucket.get(o.key))?.text()) ?? "" });
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  return out;
}

afterEach(() => vi.restoreAllMocks());

describe("leak scan", () => {
  it("no canary secret and no base-prompt text in R2, the logs or the Durable Object's storage", async () => {
    const providerKey = env.MOONSHOT_API_KEY as string;
    const channelSecret = (env as unknown as Record<string, string>).TELEGRAM_BOT_TOKEN as string;
    const adminToken = env.GATEWAY_ADMIN_TOKEN as string;
    const base = getBasePrompt().content;
    // Distinctive runs of the base prompt: any of them in storage or a log would be a leak.
    const baseSlices = [0.2, 0.5, 0.8].map((f) => base.slice(Math.floor(base.length * f), Math.floor(base.length * f) + 48));
    const canaries = {
      providerKey,
      channelSecret,
      adminToken,
      apiToken: ALICE,
      ...Object.fromEntries(baseSlices.map((s, i) => [`base${i}`, s])),
    };

    const lines: string[] = [];
    for (const level of ["log", "warn", "error", "info", "debug"] as const)
      vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
        lines.push(args.map(String).join(" "));
      });

    const host = uniqueHost("script");
    const agentId = `leak-${crypto.randomUUID().slice(0, 8)}`;
    await scriptProvider(host, [
      // The tool's output will carry the channel secret.
      { tool_calls: [{ id: "t1", name: "test__echo", arguments: JSON.stringify({ text: `bot token is ${channelSecret}` }) }] },
      // And the model tries to hand over its instructions.
      { content: `Sure, here are my instructions:\n${base}` },
    ]);
    const app = appFor(runConfig(host, { agentId }));
    const sent = await call(app, "POST", "/v1/chat/messages", {
      user_id: "u",
      room_id: "r",
      agent_id: agentId,
      message: `my key is ${providerKey} and the admin token is ${adminToken}`,
    });
    const run = await waitForRun(app, sent.body.id);
    expect(run.status).toBe("completed");
    const stub = env.SESSIONS.get(env.SESSIONS.idFromString(runObjectId(sent.body.id) as string));
    await until(async () => (await auditBacklog(stub)) === 0);
    await until(async () => (await env.AUDIT.list({ prefix: `${run.artifact_path}/` })).objects.length === 1); // bundle.jsonl
    // Read side too: what admins and callers get back.
    const views = [
      (await call(app, "GET", `/v1/runs/${run.id}`)).text,
      (await call(app, "GET", `/api/admin/runs/${run.id}`, undefined, ADMIN)).text,
      (await call(app, "GET", `/api/admin/chat/sessions/${sent.body.session_id}/messages`, undefined, ADMIN)).text,
    ];

    const storage = await runInDurableObject(stub, (_i, state: DurableObjectState) => {
      const tables = state.storage.sql
        .exec<{ name: string }>(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND substr(name, 1, 4) <> '_cf_' AND name NOT LIKE '%_fts%'",
        )
        .toArray();
      return tables.map((t) => `${t.name}: ${JSON.stringify(state.storage.sql.exec(`SELECT * FROM "${t.name}"`).toArray())}`);
    });
    const objects = [...(await everyObject(env.AUDIT)), ...(await everyObject(env.WORKSPACE))];

    // The scenario really went through every place being scanned.
    expect(objects.some((o) => o.key.startsWith(`agents/${agentId}/audit/`))).toBe(true);
    expect(storage.some((row) => row.startsWith("transcript:") && row.includes("[REDACTED:"))).toBe(true);
    // Issue 23: the model call is logged on the turn's one line (run.turn), no longer as model.call.
    expect(lines.some((l) => l.includes('"event":"run.turn"'))).toBe(true);

    const places = [
      ...objects.map((o) => ({ where: `R2 ${o.key}`, text: o.text })),
      ...lines.map((l, i) => ({ where: `log line ${i}`, text: l })),
      ...storage.map((s) => ({ where: `DO ${s.slice(0, s.indexOf(":"))}`, text: s })),
      ...views.map((v, i) => ({ where: `view ${i}`, text: v })),
    ];
    const found = places.flatMap((p) =>
      Object.entries(canaries)
        .filter(([, value]) => p.text.includes(value))
        .map(([name]) => `${name} in ${p.where}`),
    );
    expect(found).toEqual([]);
  });
});

describe("S1 §4.2 / §4.5 message text in logs only behind the local debug switch", () => {
  const lines: string[] = [];
  const capture = () => {
    lines.length = 0;
    for (const level of ["log", "warn", "error"] as const)
      vi.spyOn(console, level).mockImplementation((...args: unknown[]) => {
        lines.push(args.map(String).join(" "));
      });
  };
  const message = `mail me at jane.doe@example.com or +44 20 7946 0958, key ${env.MOONSHOT_API_KEY}`;
  const debugLines = (runId: string) =>
    lines.filter((l) => l.includes('"event":"debug.content"') && l.includes(runId)).map((l) => JSON.parse(l));

  it("logging.debugContent on + a local provider: the text is logged with secrets, emails and phones redacted", async () => {
    capture();
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "noted, jane.doe@example.com" }]);
    const app = appFor(runConfig(host, { provider: { local: true }, logging: { debugContent: { enabled: true } } }));
    const run = await waitForRun(app, await startRunAs(app, message));
    expect(debugLines(run.id).map((l) => [l.role, l.text])).toEqual([
      ["user", "mail me at [REDACTED:email] or [REDACTED:phone], key [REDACTED:secret]"],
      ["assistant", "noted, [REDACTED:email]"],
    ]);
  });

  it("a remote provider, or the switch off (the default): no message text in any log line", async () => {
    for (const o of [{ logging: { debugContent: { enabled: true } } }, { provider: { local: true } }]) {
      capture();
      const host = uniqueHost("script");
      await scriptProvider(host, [{ content: "reply text" }]);
      const app = appFor(runConfig(host, o));
      const run = await waitForRun(app, await startRunAs(app, message));
      expect(debugLines(run.id)).toEqual([]);
      expect(lines.some((l) => l.includes("jane.doe") || l.includes("reply text"))).toBe(false);
    }
  });
});

async function startRunAs(app: ReturnType<typeof appFor>, message: string): Promise<string> {
  const res = await call(app, "POST", "/v1/runs", { agent_id: "main", message });
  return res.body.id as string;
}

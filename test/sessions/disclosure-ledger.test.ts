/**
 * Issue 33: the conversation's disclosure ledger lives in the SessionDO (src/sessions/disclosure-ledger.ts), saved
 * in the commit of each model reply. It survives an eviction: hidden text split over two turns with the object
 * evicted between them is still put together, and the second turn refused. A conversation that never released
 * model text has no ledger table at all (it is made on first write).
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { disclosureRefusalMessage } from "../../src/prompts/disclosure";
import { ledgerSummary } from "../../src/sessions/disclosure-ledger";
import { createSql } from "../../src/storage/sql";
import { runConfig, scriptProvider, uniqueHost } from "../support/config";
import { ADMIN, appFor, call, until } from "../support/runs";

const BASE_WORDS = "You are Sophie, an AI agent operated through the Sophie Gateway on behalf of the organisation".split(" ");

async function turn(app: ReturnType<typeof appFor>, room: string, message: string): Promise<{ id: string; output: string }> {
  const sent = await call(app, "POST", "/v1/chat/messages", { user_id: "u1", room_id: room, agent_id: "main", message });
  let run = { status: "", output: "" };
  await until(async () => {
    run = (await call(app, "GET", `/v1/runs/${sent.body.id}`)).body;
    return run.status === "completed";
  });
  return { id: sent.body.id, output: run.output };
}

describe("ISSUE33 the disclosure ledger in the SessionDO", () => {
  it("ISSUE33 ledger: 4 hidden words, an eviction, the next 4 words — the second turn is refused; the ledger counts the refusal", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: `Sure. ${BASE_WORDS.slice(0, 4).join(" ")}` }, { content: BASE_WORDS.slice(4, 8).join(" ") }]);
    const app = appFor(runConfig(host, { agent: { tools: { allow: [] } } }));
    const room = `room-${crypto.randomUUID().slice(0, 8)}`;
    const first = await turn(app, room, "one");
    expect(first.output).toBe("Sure. You are Sophie, an");

    const detail = await call(app, "GET", `/api/admin/runs/${first.id}`, undefined, ADMIN);
    const indexed = await env.DB.prepare("SELECT session_key FROM runs WHERE run_id = ?").bind(first.id).first<{ session_key: string }>();
    const stub = env.SESSIONS.getByName(indexed?.session_key ?? detail.body.run.session_key);
    await evictDurableObject(stub);

    const second = await turn(app, room, "two");
    expect(second.output).toBe(disclosureRefusalMessage());
    const summary = await runInDurableObject(stub, (_o, state) => ledgerSummary(createSql(state.storage.sql)));
    expect(summary).toEqual({ covered: 4, refusals: 1, lastRefusal: "verbatim_hidden_text" });
  });

  it("ISSUE33 ledger: a conversation that released nothing of the hidden layers has no ledger table", async () => {
    const host = uniqueHost("script");
    await scriptProvider(host, [{ content: "Bake it until the crust sounds hollow." }]);
    const app = appFor(runConfig(host, { agent: { tools: { allow: [] } } }));
    const { id } = await turn(app, `room-${crypto.randomUUID().slice(0, 8)}`, "bread?");
    const indexed = await env.DB.prepare("SELECT session_key FROM runs WHERE run_id = ?").bind(id).first<{ session_key: string }>();
    const stub = env.SESSIONS.getByName(indexed?.session_key ?? "");
    const tables = await runInDurableObject(stub, (_o, state) =>
      state.storage.sql.exec("SELECT name FROM sqlite_master WHERE name = 'disclosure_ledger'").toArray(),
    );
    expect(tables).toEqual([]);
  });
});

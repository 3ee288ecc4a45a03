/**
 * Retrieval (S4 §5) and compaction in the SessionDO (S1 §5.3): memory items
 * with stable ids searched with FTS5, the RETRIEVED_MEMORY block exactly as S4
 * shows it inside L6, [mem:<id>] citations preserved, summaries stored with
 * evidence pointers and archived to R2, condense actions, and the bounded,
 * budgeted history for the next turn.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { estimateMessagesTokens } from "../../src/context/budget";
import { assemblePromptStack, toChatMessages } from "../../src/prompts/assemble";
import { checkOutput } from "../../src/prompts/output-guard";
import { redactText } from "../../src/security/redact";
import { formatRetrievedItems, ftsQuery, memoryId } from "../../src/sessions/memory";
import { extractNotes } from "../../src/sessions/notes";
import { recallIn } from "../support/memory";
import { applyNotesIn, historyIn, rememberIn } from "../support/session";

const identityFor = (name: string) => ({ sessionKey: `agent:main:http:${name}:dm:u`, agentId: "main" });
const stubFor = (name: string) => env.SESSIONS.getByName(identityFor(name).sessionKey);

async function fill(name: string, turns: number, words = 20) {
  const stub = stubFor(name);
  for (let t = 1; t <= turns; t++) {
    await stub.enqueueMessage(identityFor(name), {
      message: `question ${t} ${"about the deploy pipeline ".repeat(words)}`,
      source: "http",
      limits: { maxTurns: 10_000, maxBytes: 100_000_000 },
    });
  }
  return stub;
}

describe("S4 §5 retrieval", () => {
  it("memory ids are stable: the same kind and text give the same id", async () => {
    expect(await memoryId("decision", "ship on Fridays")).toBe(await memoryId("decision", "ship on Fridays"));
    expect(await memoryId("decision", "ship on Fridays")).toMatch(/^mem_[0-9a-f]{16}$/);
    const stub = stubFor("mem-1");
    const a = await rememberIn(stub, identityFor("mem-1"), { kind: "decision", text: "ship on Fridays" });
    const b = await rememberIn(stub, identityFor("mem-1"), { kind: "decision", text: "ship on Fridays" });
    expect(b.id).toBe(a.id);
  });

  it("FTS5 ranks the relevant item first, and the block is exactly S4's format inside L6", async () => {
    const id = identityFor("mem-2");
    const stub = stubFor("mem-2");
    await rememberIn(stub, id, { kind: "note", text: "The staging database ran out of connections during the deploy." });
    await rememberIn(stub, id, { kind: "decision", text: "Lunch is at noon on Thursdays." });
    await rememberIn(stub, id, { kind: "note", text: "Raise the database connection pool to 50 before the next deploy." });
    const items = await recallIn(stub, "why did the deploy fail? database connections", 2);
    expect(items).toHaveLength(2);
    expect(items.every((i) => i.text.includes("database"))).toBe(true);
    expect(items[0]?.score).toBeGreaterThanOrEqual(items[1]?.score ?? 0);
    const inner = formatRetrievedItems(items);
    const p = await assemblePromptStack({
      agentId: "main",
      channel: "http",
      toolPolicy: "none",
      userMessage: "what happened?",
      l6Context: [{ kind: "retrieved_memory", text: inner }],
    });
    const lines = p.user.split("\n");
    expect(lines[0]).toBe("=== RETRIEVED_MEMORY ===");
    expect(lines[1]).toMatch(/^- id=mem_[0-9a-f]{16} score=\d+\.\d{3}$/);
    expect(lines[2]).toMatch(/^ {2}\S/);
    expect(lines[5]).toBe("=== END_RETRIEVED_MEMORY ===");
    expect(lines.at(-1)).toBe("what happened?");
    expect(p.system.some((s) => s.content.includes("RETRIEVED_MEMORY"))).toBe(false);
  });

  it("queries cannot inject FTS5 syntax", async () => {
    expect(ftsQuery('NEAR("a" OR *) AND')).toBe('"near" OR "or" OR "and"');
    expect(ftsQuery("* ( ) ")).toBeNull();
    expect(await recallIn(stubFor("mem-3"), 'x" OR 1=1 --', 3)).toEqual([]);
  });

  it("[mem:<id>] citations survive NOTES stripping, redaction and the output guard", () => {
    const reply = "The pool was too small [mem:mem_0123456789abcdef].";
    expect(extractNotes(`${reply}<<<NOTES_JSON>>>{}<<<END_NOTES_JSON>>>`).visible).toBe(reply);
    expect(redactText(reply)).toBe(reply);
    expect(checkOutput(reply)).toEqual({ blocked: false });
  });
});

describe("compaction in the SessionDO (S1 §5.3)", () => {
  it("condense_now (a NOTES action) stores a summary with evidence pointers and archives it to R2", async () => {
    const stub = await fill("cmp-1", 6, 2);
    const result = await applyNotesIn(stub, identityFor("cmp-1"), 'done <<<NOTES_JSON>>>{"actions":["condense_now"]}<<<END_NOTES_JSON>>>');
    expect(result.compaction).toBe("now");
    const items = await recallIn(stub, "question deploy pipeline", 10);
    const summary = items.find((i) => i.kind === "summary");
    expect(summary?.text.split("\n")[0]).toMatch(/^Summary of turns seq \d+-\d+:$/);
    const listed = await env.AUDIT.list({ prefix: "agents/main/sessions/agent:main:http:cmp-1:dm:u/" });
    const archived = listed.objects.find((o) => o.key.includes(".summary-"));
    expect(archived).toBeDefined();
    const body = JSON.parse(await ((await env.AUDIT.get(archived?.key as string)) as R2ObjectBody).text());
    expect(body.evidence).toHaveLength(4); // six turns, the last two kept verbatim
    expect(body.text).toBe(summary?.text);
  });

  it("buildHistory: within budget no compaction; over budget compacts and stores the summary; the next call reuses it", async () => {
    const id = identityFor("cmp-2");
    const stub = await fill("cmp-2", 30, 30);
    const roomy = await historyIn(stub, id, { window: { contextWindow: 131072, maxOutputTokens: 4096 }, fixedTokens: 1500 });
    expect(roomy.ok && roomy.summaries).toEqual([]);
    const tight = await historyIn(stub, id, { window: { contextWindow: 4000, maxOutputTokens: 500 }, fixedTokens: 1500, keepTurns: 3 });
    if (!tight.ok) throw new Error("expected compaction to fit");
    expect(tight.summaries).toHaveLength(1);
    expect(tight.messages.map((m) => m.content.split(" ")[1])).toEqual(["28", "29", "30"]);
    expect(tight.estimatedTokens).toBeLessThanOrEqual(3500);
    const again = await historyIn(stub, id, { window: { contextWindow: 4000, maxOutputTokens: 500 }, fixedTokens: 1500, keepTurns: 3 });
    expect(again.ok && again.summaries[0]).toBe(tight.summaries[0]);
  });

  it("still over budget after compaction → over_budget, so the model is never called", async () => {
    const stub = await fill("cmp-3", 5, 300);
    const r = await historyIn(stub, identityFor("cmp-3"), {
      window: { contextWindow: 2500, maxOutputTokens: 500 },
      fixedTokens: 1500,
      keepTurns: 3,
    });
    expect(r).toMatchObject({ ok: false, error: "over_budget", inputBudget: 2000 });
  });

  it("the compacted history plus the stack fits the model window used to build it", async () => {
    const id = identityFor("cmp-4");
    const stub = await fill("cmp-4", 20, 30);
    const stack = await assemblePromptStack({ agentId: "main", channel: "http", toolPolicy: "native", userMessage: "next?" });
    const fixed = estimateMessagesTokens(toChatMessages(stack));
    const window = { contextWindow: fixed + 3000, maxOutputTokens: 800 };
    const h = await historyIn(stub, id, { window, fixedTokens: fixed, keepTurns: 2 });
    if (!h.ok) throw new Error("expected a fit");
    const final = await assemblePromptStack({
      agentId: "main",
      channel: "http",
      toolPolicy: "native",
      userMessage: "next?",
      history: h.messages.map((m) => ({ role: m.role === "assistant" ? "assistant" : "user", content: m.content })),
      l6Context: h.summaries.map((text) => ({ kind: "compaction_summary" as const, text })),
    });
    expect(estimateMessagesTokens(toChatMessages(final))).toBeLessThanOrEqual(window.contextWindow - window.maxOutputTokens);
  });
});

describe("NOTES feed memory; caps are per agent", () => {
  it("decisions and the episode summary from NOTES become searchable memory items", async () => {
    const id = identityFor("mem-notes");
    const stub = stubFor("mem-notes");
    await applyNotesIn(
      stub,
      id,
      'ok <<<NOTES_JSON>>>{"add_decisions":["use Postgres for the billing ledger"],"set_episode_summary":"Discussed the billing migration."}<<<END_NOTES_JSON>>>',
    );
    const found = await recallIn(stub, "billing ledger postgres", 5);
    expect(found.map((i) => i.kind).sort()).toEqual(["decision", "note"]);
    expect(found[0]?.text).toBe("use Postgres for the billing ledger");
  });

  it("an agent's context caps (config agents.<id>.context) are what buildHistory applies", async () => {
    const id = identityFor("caps-agent");
    const stub = await fill("caps-agent", 5, 20);
    const caps = { perMessage: 100, toolSummary: 220, toolError: 320, toolOutput: 1000, total: 1000 };
    const h = await historyIn(stub, id, { window: { contextWindow: 131072, maxOutputTokens: 4096 }, fixedTokens: 100, caps });
    if (!h.ok) throw new Error("expected a fit");
    expect(h.messages.every((m) => m.content.length <= 100)).toBe(true);
    expect(h.messages.reduce((n, m) => n + m.content.length, 0)).toBeLessThanOrEqual(1000);
    expect(h.messages).toHaveLength(5);
  });
});

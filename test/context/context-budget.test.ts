/**
 * S1 §1.5 per-model context budget and S1 §5.3 compaction: estimate, reserve
 * output, apply the window; over budget → compaction (summary with evidence
 * pointers, last N turns kept, L1–L4 untouched); still over → OverBudgetError
 * before any network call — zero requests reach the provider.
 */
import { describe, expect, it } from "vitest";
import { enforceBudget, estimateMessagesTokens, inputBudget, OverBudgetError } from "../../src/context/budget";
import { compact, turns } from "../../src/context/compaction";
import { type HistoryRow, prepareHistory } from "../../src/context/history";
import { assemblePromptStack, estimatePromptTokens, toChatMessages } from "../../src/prompts/assemble";
import { getBasePrompt } from "../../src/prompts/catalog";

function conversation(turnCount: number, words = 30): HistoryRow[] {
  const rows: HistoryRow[] = [];
  let seq = 0;
  for (let t = 1; t <= turnCount; t++) {
    rows.push({ seq: ++seq, role: "user", content: `question ${t}: ${"lorem ipsum ".repeat(words)}` });
    rows.push({ seq: ++seq, role: "assistant", content: `answer ${t}: ${"dolor sit amet ".repeat(words)}` });
  }
  return rows;
}

describe("S1 §1.5 budget pipeline", () => {
  it("input budget = contextWindow − maxOutputTokens; there is no global window", () => {
    expect(inputBudget({ contextWindow: 131072, maxOutputTokens: 4096 })).toBe(126976);
    expect(inputBudget({ contextWindow: 32768, maxOutputTokens: 4096 })).toBe(28672);
  });

  it("estimatePromptTokens (from the manifest's per-layer estimates) equals estimating the chat messages", async () => {
    const cases = [
      { userMessage: "hello" },
      { userMessage: "Grüße aus Köln — 你好，世界 🙂", recovery: true },
      {
        userMessage: "and now?",
        history: [
          { role: "user" as const, content: "first question" },
          { role: "assistant" as const, content: "first answer, with some detail" },
        ],
        l6Context: [{ kind: "compaction_summary" as const, text: "Summary of turns seq 1-8: the user asked about budgets." }],
      },
    ];
    for (const c of cases) {
      const prompt = await assemblePromptStack({ agentId: "main", channel: "http", toolPolicy: "native", ...c });
      expect(estimatePromptTokens(prompt)).toBe(estimateMessagesTokens(toChatMessages(prompt)));
    }
  });

  it("enforceBudget passes at the exact budget and throws OverBudgetError one token over", () => {
    const messages = [{ content: "hello there, general kenobi" }];
    const need = estimateMessagesTokens(messages);
    expect(enforceBudget({ contextWindow: need + 100, maxOutputTokens: 100 }, messages)).toEqual({ estimated: need, budget: need });
    expect(() => enforceBudget({ contextWindow: need + 99, maxOutputTokens: 100 }, messages)).toThrow(OverBudgetError);
    try {
      enforceBudget({ contextWindow: need + 99, maxOutputTokens: 100 }, messages);
    } catch (err) {
      expect(err).toMatchObject({ code: "over_budget", status: 413, estimatedInputTokens: need, inputBudget: need - 1 });
    }
  });
  // Through a run (the budget checked in buildPrompt before any request): test/runs/runs.test.ts › "S1 §1.5 over the context budget → run.failed over_budget with zero outbound requests".
});

describe("S1 §5.3 compaction", () => {
  it("keeps the last N turns verbatim and summarises the rest with evidence pointers (seq ranges)", () => {
    const rows = conversation(6, 3);
    const { summary, kept } = compact(rows, 2);
    expect(kept.map((r) => r.seq)).toEqual([9, 10, 11, 12]);
    expect(summary?.fromSeq).toBe(1);
    expect(summary?.toSeq).toBe(8);
    expect(summary?.evidence).toEqual([
      [1, 2],
      [3, 4],
      [5, 6],
      [7, 8],
    ]);
    expect(summary?.text.split("\n")[0]).toBe("Summary of turns seq 1-8:");
    expect(summary?.text.split("\n")[1]).toBe(
      "[seq 1-2] | user: question 1: lorem ipsum lorem ipsum lorem ipsum | assistant: answer 1: dolor sit amet dolor sit amet dolor sit amet",
    );
  });

  it("is deterministic: the same transcript gives the same summary", () => {
    expect(compact(conversation(8), 3)).toEqual(compact(conversation(8), 3));
  });

  it("tool turns name their tools; a tool call is never separated from its results (turns move whole)", () => {
    const rows: HistoryRow[] = [
      { seq: 1, role: "user", content: "list files" },
      { seq: 2, role: "assistant", content: "" },
      { seq: 3, role: "tool", content: '{"summary":"3 entries"}', tool_name: "fs.list_dir", tool_call_id: "c1" },
      { seq: 4, role: "assistant", content: "There are 3 files." },
      { seq: 5, role: "user", content: "thanks" },
      { seq: 6, role: "assistant", content: "You're welcome." },
    ];
    expect(turns(rows).map((t) => t.map((r) => r.seq))).toEqual([
      [1, 2, 3, 4],
      [5, 6],
    ]);
    const { summary, kept } = compact(rows, 1);
    expect(kept.map((r) => r.seq)).toEqual([5, 6]);
    expect(summary?.text).toContain("[seq 1-4] | user: list files | tools: fs.list_dir | assistant: There are 3 files.");
  });

  it("overflow triggers compaction; the result fits the budget and L1–L4 are untouched", async () => {
    const rows = conversation(40);
    const stack = await assemblePromptStack({ agentId: "main", channel: "http", toolPolicy: "native", userMessage: "and now?" });
    const fixed = estimateMessagesTokens(toChatMessages(stack));
    const window = { contextWindow: fixed + 2500, maxOutputTokens: 500 };
    const prepared = prepareHistory(rows, { window, fixedTokens: fixed, keepTurns: 3 });
    expect(prepared.summary).not.toBeNull();
    expect(prepared.messages.map((m) => m.content.split(":")[0])).toEqual([
      "question 38",
      "answer 38",
      "question 39",
      "answer 39",
      "question 40",
      "answer 40",
    ]);
    expect(prepared.estimatedTokens).toBeLessThanOrEqual(inputBudget(window));
    // The summary goes inside L6; the hidden layers are byte-identical to a stack without it.
    const withSummary = await assemblePromptStack({
      agentId: "main",
      channel: "http",
      toolPolicy: "native",
      userMessage: "and now?",
      l6Context: [{ kind: "compaction_summary", text: prepared.summary?.text ?? "" }],
    });
    expect(withSummary.system).toEqual(stack.system);
    expect(withSummary.system[0]?.content).toBe(getBasePrompt().content);
  });

  it("fits without compaction when there is room", () => {
    const prepared = prepareHistory(conversation(3), { window: { contextWindow: 131072, maxOutputTokens: 4096 }, fixedTokens: 1000 });
    expect(prepared.summary).toBeNull();
    expect(prepared.messages).toHaveLength(6);
  });

  it("condense_now forces compaction even when the history fits", () => {
    const prepared = prepareHistory(conversation(6), {
      window: { contextWindow: 131072, maxOutputTokens: 4096 },
      fixedTokens: 1000,
      keepTurns: 2,
      forceCompaction: true,
    });
    expect(prepared.summary?.evidence).toHaveLength(4);
    expect(prepared.messages).toHaveLength(4);
  });

  it("still over budget after compaction → OverBudgetError", () => {
    expect(() =>
      prepareHistory(conversation(10, 200), { window: { contextWindow: 3000, maxOutputTokens: 500 }, fixedTokens: 2000, keepTurns: 3 }),
    ).toThrow(OverBudgetError);
  });
});

describe("per-turn cost does not grow with transcript length", () => {
  it("collectRecentRows reads the same pages for 100 and 100,000 messages", async () => {
    const { collectRecentRows } = await import("../../src/context/history");
    const pagesRead = (total: number) => {
      let calls = 0;
      let rowsRead = 0;
      const rows = collectRecentRows((before, limit) => {
        calls++;
        const out: { seq: number; content: string }[] = [];
        for (let seq = Math.min(before - 1, total); seq >= 1 && out.length < limit; seq--) out.push({ seq, content: "x".repeat(200) });
        rowsRead += out.length;
        return out;
      });
      return { calls, rowsRead, first: rows[0]?.seq, last: rows.at(-1)?.seq };
    };
    // 200-character messages: 12000 / 200 = 60 rows fill the S3 cap, so one 64-row page is enough.
    expect(pagesRead(100)).toEqual({ calls: 1, rowsRead: 64, first: 37, last: 100 });
    expect(pagesRead(100_000)).toEqual({ calls: 1, rowsRead: 64, first: 99_937, last: 100_000 });
    expect(pagesRead(10)).toEqual({ calls: 1, rowsRead: 10, first: 1, last: 10 });
  });
});

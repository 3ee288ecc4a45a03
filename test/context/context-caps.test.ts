/**
 * S3 §6 chat session context policy: tool normalisation, the 1400 / 220 /
 * 320 / 1000 / 12000 caps at their exact boundaries, oldest dropped first,
 * tool call/result pairs never split.
 */
import { describe, expect, it } from "vitest";
import { buildContext, capText, DEFAULT_CONTEXT_CAPS, normaliseToolEntry, type TranscriptEntry } from "../../src/context/caps";

const user = (content: string): TranscriptEntry => ({ role: "user", content });
const assistant = (content: string, toolCalls?: { id: string; name: string }[]): TranscriptEntry => ({
  role: "assistant",
  content,
  ...(toolCalls ? { toolCalls } : {}),
});

describe("S3 §6 caps", () => {
  it("the defaults are S3's numbers", () => {
    expect(DEFAULT_CONTEXT_CAPS).toEqual({ perMessage: 1400, toolSummary: 220, toolError: 320, toolOutput: 1000, total: 12000 });
  });

  it("per-message cap 1400: 1400 characters pass unchanged, 1401 are cut to 1400 ending in …", () => {
    const exact = "a".repeat(1400);
    expect(buildContext([user(exact)]).messages[0]?.content).toBe(exact);
    const over = buildContext([user("b".repeat(1401))]).messages[0]?.content as string;
    expect(over).toHaveLength(1400);
    expect(over.endsWith("…")).toBe(true);
    expect(capText("abc", 3)).toBe("abc");
    expect(capText("abcd", 3)).toBe("ab…");
  });

  it("tool messages: 'tool <name> result (<id>)' + summary ≤ 220, error ≤ 320, output ≤ 1000", () => {
    const text = normaliseToolEntry(
      {
        role: "tool",
        toolName: "fs.read_text",
        toolCallId: "call_1",
        summary: "s".repeat(221),
        error: "e".repeat(320),
        output: "o".repeat(1001),
      },
      DEFAULT_CONTEXT_CAPS,
    );
    const [head, summary, error, output] = text.split("\n");
    expect(head).toBe("tool fs.read_text result (call_1)");
    expect(summary).toBe(`summary: ${"s".repeat(219)}…`);
    expect(error).toBe(`error: ${"e".repeat(320)}`);
    expect(output).toBe(`output: ${"o".repeat(999)}…`);
  });

  it("a normalised tool message is still held to the 1400 per-message cap", () => {
    const { messages } = buildContext([
      assistant("", [{ id: "c1", name: "http.get" }]),
      { role: "tool", toolName: "http.get", toolCallId: "c1", summary: "s".repeat(220), error: "e".repeat(320), output: "o".repeat(1000) },
    ]);
    expect(messages[1]?.role).toBe("tool");
    expect(messages[1]?.content).toHaveLength(1400);
  });

  it("total cap 12000: exactly 12000 characters are all kept; one more drops the oldest message", () => {
    const ten = Array.from({ length: 10 }, (_, i) => user(String(i).repeat(1200)));
    expect(buildContext(ten)).toMatchObject({ dropped: 0 });
    expect(buildContext(ten).messages.reduce((n, m) => n + m.content.length, 0)).toBe(12000);
    const plusOne = [...ten, user("x")];
    const r = buildContext(plusOne);
    expect(r.dropped).toBe(1);
    expect(r.messages[0]?.content).toBe("1".repeat(1200));
    expect(r.messages.at(-1)?.content).toBe("x");
  });

  it("the latest turns and recent tool results are retained when old ones are dropped", () => {
    const old = Array.from({ length: 30 }, (_, i) => user(`old ${i} ${"z".repeat(1000)}`));
    const recent: TranscriptEntry[] = [
      user("please fetch it"),
      assistant("", [{ id: "c9", name: "http.get" }]),
      { role: "tool", toolName: "http.get", toolCallId: "c9", summary: "200 OK" },
      assistant("Here it is."),
    ];
    const { messages } = buildContext([...old, ...recent]);
    expect(messages.slice(-4).map((m) => m.content)).toEqual([
      "please fetch it",
      "",
      "tool http.get result (c9)\nsummary: 200 OK",
      "Here it is.",
    ]);
    expect(messages.reduce((n, m) => n + m.content.length, 0)).toBeLessThanOrEqual(12000);
  });

  it("a tool call and its results are never split: they leave the context together", () => {
    const call = assistant("a".repeat(10), [
      { id: "c1", name: "fs.list_dir" },
      { id: "c2", name: "fs.read_text" },
    ]);
    const r1: TranscriptEntry = { role: "tool", toolName: "fs.list_dir", toolCallId: "c1", output: "o".repeat(1000) };
    const r2: TranscriptEntry = { role: "tool", toolName: "fs.read_text", toolCallId: "c2", output: "p".repeat(1000) };
    const tail = Array.from({ length: 9 }, (_, i) => user(String(i).repeat(1200)));
    // Budget: the tail takes 10800; the call unit (10 + 2 × ~1036) does not fit in the remaining 1200,
    // and neither the results nor the call may stay without the other.
    const { messages } = buildContext([call, r1, r2, ...tail]);
    expect(messages.some((m) => m.role === "tool")).toBe(false);
    expect(messages.some((m) => m.role === "assistant")).toBe(false);
    // With room for it, the whole unit stays.
    const roomy = buildContext([call, r1, r2, ...tail.slice(0, 5)]);
    expect(roomy.messages.slice(0, 3).map((m) => m.role)).toEqual(["assistant", "tool", "tool"]);
  });

  it("caps are configurable per agent", () => {
    const caps = { ...DEFAULT_CONTEXT_CAPS, perMessage: 10, total: 25 };
    const { messages, dropped } = buildContext([user("first message"), user("second message"), user("third message")], caps);
    expect(messages.map((m) => m.content)).toEqual(["second me…", "third mes…"]);
    expect(dropped).toBe(1);
  });
});

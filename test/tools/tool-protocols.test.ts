/**
 * Pieces of the run engine's tool rounds, tested on their own: the S4 §3
 * marker protocol (parse, validate ids unique, strip from visible text), tool
 * wire names for OpenAI-compatible function calling, and S3 §1 envelopes.
 */
import { describe, expect, it } from "vitest";
import { parseToolCallMarkers, toolResultMessage } from "../../src/runs/tool-markers";
import { clampTimeout, ToolRequest, ToolResponse } from "../../src/tools/envelope";
import { toWireName, wireNameMap } from "../../src/tools/wire-names";

const block = (json: string) => `<<<TOOL_CALLS_JSON>>>\n${json}\n<<<END_TOOL_CALLS_JSON>>>`;

describe("S4 §3 tool-call markers", () => {
  it("parses S4's example and removes the block from visible text", () => {
    const reply = `Let me look.\n${block('[{"id":"t1","tool":"fs.list_dir","args":{"path":"."}},{"id":"t2","tool":"shell.exec","args":{"cmd":"ls -la","timeout_s":10}}]')}`;
    expect(parseToolCallMarkers(reply)).toEqual({
      visible: "Let me look.",
      calls: [
        { id: "t1", tool: "fs.list_dir", args: { path: "." } },
        { id: "t2", tool: "shell.exec", args: { cmd: "ls -la", timeout_s: 10 } },
      ],
      error: null,
    });
  });

  const bad: [string, string, string][] = [
    [
      "duplicate ids",
      block('[{"id":"t1","tool":"a","args":{}},{"id":"t1","tool":"b","args":{}}]'),
      'tool call ids must be unique ("t1" repeats)',
    ],
    ["missing args", block('[{"id":"t1","tool":"a"}]'), "tool call 1: args is invalid"],
    ["args not an object", block('[{"id":"t1","tool":"a","args":[1]}]'), "tool call 1: args is invalid"],
    ["not an array", block('{"id":"t1","tool":"a","args":{}}'), "tool-call block must be a JSON array"],
    ["invalid JSON", block("[{oops"), "tool-call block is not valid JSON"],
    ["unterminated", 'Working <<<TOOL_CALLS_JSON>>> [{"id":"t1"', "unterminated tool-call block"],
  ];
  for (const [name, reply, error] of bad) {
    it(`${name} → no calls, a reason, and the markers never visible`, () => {
      const r = parseToolCallMarkers(reply);
      expect(r.calls).toEqual([]);
      expect(r.error).toBe(error);
      expect(r.visible).not.toContain("TOOL_CALLS");
    });
  }

  it("a reply without markers is plain text", () => {
    expect(parseToolCallMarkers("  just text  ")).toEqual({ visible: "just text", calls: [], error: null });
  });

  it("tool results go back as S4 §3 JSON content", () => {
    expect(JSON.parse(toolResultMessage({ id: "t1", tool: "fs.list_dir", ok: true, output: { entries: ["a"] }, error: null }))).toEqual({
      id: "t1",
      tool: "fs.list_dir",
      ok: true,
      output: { entries: ["a"] },
      error: null,
    });
    expect(
      JSON.parse(
        toolResultMessage({ id: "t2", tool: "x", ok: false, output: { partial: 1 }, error: { code: "policy.denied", message: "no" } }),
      ),
    ).toEqual({
      id: "t2",
      tool: "x",
      ok: false,
      output: null,
      error: { code: "policy.denied", message: "no" },
    });
  });
});

describe("tool wire names", () => {
  it("dotted names get a legal function name and map back", () => {
    expect(toWireName("fs.read_text")).toBe("fs__read_text");
    const map = wireNameMap(["fs.read_text", "http.get", "automation.complete", "verify"]);
    expect(map.fromWire("fs__read_text")).toBe("fs.read_text");
    expect(map.fromWire("automation__complete")).toBe("automation.complete");
    expect(map.fromWire("verify")).toBe("verify");
    expect(map.fromWire("fs_read_text")).toBeUndefined();
  });

  it("refuses names that would collide or cannot be expressed", () => {
    expect(() => wireNameMap(["a.b", "a__b"])).toThrow('tools "a.b" and "a__b" would share the wire name "a__b"');
    expect(() => toWireName("bad name")).toThrow('tool name "bad name" has no legal wire name');
  });
});

describe("S3 §1 envelopes", () => {
  it("the request example validates; timeout_ms defaults to 30000", () => {
    const r = ToolRequest.parse({
      request_id: "req_123",
      run_id: "run_123",
      agent_id: "agent_default",
      tool: "fs.read",
      input: {},
      created_at: "2026-02-15T00:00:00Z",
    });
    expect(r.timeout_ms).toBe(30000);
    expect(clampTimeout(undefined, { min: 1000, max: 20000 })).toBe(20000);
    expect(clampTimeout(500, { min: 1000, max: 60000 })).toBe(1000);
  });

  it("ok=true requires error=null; ok=false requires an error and no output", () => {
    const base = { request_id: "req_123", run_id: "run_123", tool: "fs.read", duration_ms: 14, finished_at: "2026-02-15T00:00:00Z" };
    expect(ToolResponse.safeParse({ ...base, ok: true, output: {}, error: null }).success).toBe(true);
    expect(ToolResponse.safeParse({ ...base, ok: true, output: {}, error: { code: "timeout", message: "x" } }).success).toBe(false);
    expect(ToolResponse.safeParse({ ...base, ok: false, error: null }).success).toBe(false);
    expect(
      ToolResponse.safeParse({ ...base, ok: false, output: { data: 1 }, error: { code: "timeout", message: "took too long" } }).success,
    ).toBe(false);
    expect(
      ToolResponse.safeParse({
        ...base,
        ok: false,
        error: { code: "policy.denied", message: "write outside workspace", details: { path: "../etc/passwd" } },
      }).success,
    ).toBe(true);
    expect(ToolResponse.safeParse({ ...base, ok: false, error: { code: "made.up", message: "x" } }).success).toBe(false);
  });
});

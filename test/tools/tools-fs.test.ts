/**
 * S4 §4 filesystem tools on the agent's WORKSPACE prefix in R2: path
 * resolution (every escape refused), `fs.list_dir`, `fs.read_text` and its S3
 * alias `fs.read`, input validation and the S3 §1 error codes they answer with.
 */

import { env } from "cloudflare:workers";
import { Validator } from "@cfworker/json-schema";
import { describe, expect, it } from "vitest";
import { BUILTIN_TOOLS, registerBuiltinTools } from "../../src/tools/builtin";
import { fsListDir, fsReadText } from "../../src/tools/builtin/fs";
import { resolveWorkspacePath } from "../../src/tools/paths";
import { type ToolContext, type ToolDefinition, ToolRegistry, tools } from "../../src/tools/registry";
import traversals from "../fixtures/path-traversal.json";

const ctx = (agentId: string, signal: AbortSignal = new AbortController().signal): ToolContext => ({
  env,
  agentId,
  runId: "run_fs",
  sessionKey: `agent:${agentId}:main`,
  channel: "main",
  capabilities: [],
  toolCallId: "t1",
  signal,
  timeoutMs: 30_000,
});

const seed = (agentId: string, files: Record<string, string | Uint8Array>) =>
  Promise.all(Object.entries(files).map(([path, body]) => env.WORKSPACE.put(`${agentId}/${path}`, body)));

const call = (tool: ToolDefinition, agentId: string, input: Record<string, unknown>) => tool.handler(input, ctx(agentId));

const denied = { ok: false, error: { code: "policy.denied", message: "path escapes the workspace" } };

describe("S4 §4 sandbox root: resolveWorkspacePath", () => {
  const resolves: [string, string, string][] = [
    [".", "ag/", ""],
    ["", "ag/", ""],
    ["./", "ag/", ""],
    ["notes.md", "ag/notes.md", "notes.md"],
    ["./docs/x.md", "ag/docs/x.md", "docs/x.md"],
    ["a/../b", "ag/b", "b"],
    ["a/b/../../c", "ag/c", "c"],
    ["a/..", "ag/", ""],
    ["docs//x/", "ag/docs/x", "docs/x"],
    ["docs/./x/.", "ag/docs/x", "docs/x"],
    ["...", "ag/...", "..."],
    ["a..b/..c", "ag/a..b/..c", "a..b/..c"],
    ["100%.txt", "ag/100%.txt", "100%.txt"],
    ["%41%20b", "ag/%41%20b", "%41%20b"],
    ["%2e", "ag/%2e", "%2e"],
    ["café/ü.md", "ag/café/ü.md", "café/ü.md"],
  ];
  for (const [path, key, relative] of resolves) {
    it(`normalises ${JSON.stringify(path)} to key ${JSON.stringify(key)}`, () => {
      expect(resolveWorkspacePath("ag", path)).toEqual({ ok: true, key, relative });
    });
  }

  // test/fixtures/path-traversal.json: every escape form we know of (encoded, double-encoded, Unicode,
  // backslash, NUL and control characters, absolute, overlong keys), each with the refusal it must get.
  it(`the path-traversal fixtures hold at least 40 variants (${traversals.length})`, () => {
    expect(traversals.length).toBeGreaterThanOrEqual(40);
  });
  for (const { name, path, reason } of traversals) {
    it(`refuses an escape: ${name} (${JSON.stringify(path.length > 60 ? `${path.slice(0, 60)}…` : path)})`, () => {
      expect(resolveWorkspacePath("ag", path)).toEqual({ ok: false, reason });
    });
  }

  it("caps the path at 1024 bytes, counting the agent prefix (R2's key limit)", () => {
    expect(resolveWorkspacePath("ag", "a".repeat(1021))).toEqual({ ok: true, key: `ag/${"a".repeat(1021)}`, relative: "a".repeat(1021) });
    expect(resolveWorkspacePath("ag", "a".repeat(1022))).toEqual({ ok: false, reason: "too_long" });
    expect(resolveWorkspacePath("ag", "é".repeat(513))).toEqual({ ok: false, reason: "too_long" });
    expect(resolveWorkspacePath("ag", `${"./".repeat(600)}x`)).toEqual({ ok: false, reason: "too_long" });
  });

  it("refuses agent ids outside [a-z0-9][a-z0-9_-]{0,63}", () => {
    for (const agentId of ["", "Ag", "-a", "a/b", "..", "a".repeat(65)]) {
      expect(resolveWorkspacePath(agentId, "x")).toEqual({ ok: false, reason: "invalid_agent_id" });
    }
    expect(resolveWorkspacePath("a".repeat(64), "x")).toEqual({ ok: true, key: `${"a".repeat(64)}/x`, relative: "x" });
  });
});

describe("S4 §4 tool registry: fs tools", () => {
  it("S3's fs.read resolves through the registry to fs.read_text", async () => {
    expect(tools.get("fs.read")).toBe(fsReadText);
    expect(tools.get("fs.read_text")).toBe(fsReadText);
    expect(tools.get("fs.list_dir")).toBe(fsListDir);
    await seed("alias-1", { "notes.md": "hi" });
    const tool = tools.get("fs.read");
    expect(await tool?.handler({ path: "notes.md" }, ctx("alias-1"))).toEqual({
      ok: true,
      output: { path: "notes.md", text: "hi", bytes: 2, truncated: false },
      summary: "read 2 bytes from notes.md",
    });
  });

  it("registering the built-ins again is a no-op", () => {
    expect(() => registerBuiltinTools()).not.toThrow();
    for (const def of BUILTIN_TOOLS) expect(tools.list().filter((t) => t.name === def.name)).toEqual([def]);
    const fresh = registerBuiltinTools(registerBuiltinTools(new ToolRegistry()));
    expect(fresh.list()).toEqual([...BUILTIN_TOOLS].sort((a, b) => a.name.localeCompare(b.name)));
  });

  it("both are read_only", () => {
    expect([fsListDir, fsReadText].map((t) => [t.name, t.risk])).toEqual([
      ["fs.list_dir", "read_only"],
      ["fs.read_text", "read_only"],
    ]);
  });

  it("S4 §4 signatures as JSON Schema: fs.list_dir {path:str='.', max_entries:int=200}", () => {
    expect(fsListDir.parameters).toEqual({
      type: "object",
      properties: {
        path: { type: "string", maxLength: 1024, default: ".", description: "Directory to list, relative to the workspace root" },
        max_entries: { type: "integer", minimum: 1, maximum: 1000, default: 200, description: "Most entries to return" },
      },
      additionalProperties: false,
    });
  });

  it("S4 §4 signatures as JSON Schema: fs.read_text {path:str, max_bytes:int=20000}", () => {
    expect(fsReadText.parameters).toEqual({
      type: "object",
      properties: {
        path: { type: "string", minLength: 1, maxLength: 1024, description: "File to read, relative to the workspace root" },
        max_bytes: { type: "integer", minimum: 1, maximum: 1_000_000, default: 20_000, description: "Most bytes of the file to return" },
      },
      required: ["path"],
      additionalProperties: false,
    });
  });

  it("S1 §3.1 schemas: no unions and no property named format", () => {
    for (const tool of BUILTIN_TOOLS) {
      const json = JSON.stringify(tool.parameters);
      expect(json).not.toMatch(/"(anyOf|oneOf|allOf)"/);
      expect(Object.keys(tool.parameters.properties as object)).not.toContain("format");
    }
  });

  it("the JSON Schema the model sees agrees with the handler's validation", async () => {
    await seed("schema-1", { "a.txt": "x" });
    const samples: [ToolDefinition, Record<string, unknown>][] = [
      [fsListDir, {}],
      [fsListDir, { path: "a", max_entries: 1000 }],
      [fsListDir, { max_entries: 0 }],
      [fsListDir, { max_entries: 1.5 }],
      [fsListDir, { path: 1 }],
      [fsListDir, { recursive: true }],
      [fsReadText, { path: "a.txt" }],
      [fsReadText, { path: "a.txt", max_bytes: 1_000_000 }],
      [fsReadText, {}],
      [fsReadText, { path: "" }],
      [fsReadText, { path: "a.txt", max_bytes: 1_000_001 }],
    ];
    for (const [tool, input] of samples) {
      const bySchema = new Validator(tool.parameters as never, "2020-12").validate(input).valid;
      const outcome = await call(tool, "schema-1", input);
      const byHandler = outcome.ok || outcome.error.code !== "tool.input_invalid";
      expect({ tool: tool.name, input, valid: byHandler }).toEqual({ tool: tool.name, input, valid: bySchema });
    }
  });
});

describe("S4 §4 fs.list_dir", () => {
  it("lists immediate children of the root, files with sizes and sub-directories, sorted by name", async () => {
    await seed("ls-1", {
      "b.txt": "bbb",
      "a.md": "a",
      "Z.txt": "zz",
      "docs/x.md": "xxxx",
      "docs/sub/y.md": "y",
      "img/p.png": "p",
    });
    expect(await call(fsListDir, "ls-1", { path: "." })).toEqual({
      ok: true,
      output: {
        path: ".",
        entries: [
          { name: "Z.txt", type: "file", size: 2 },
          { name: "a.md", type: "file", size: 1 },
          { name: "b.txt", type: "file", size: 3 },
          { name: "docs", type: "dir" },
          { name: "img", type: "dir" },
        ],
        truncated: false,
      },
      summary: "5 entries in .",
    });
  });

  it("lists a sub-directory given in any normalised spelling", async () => {
    await seed("ls-2", { "docs/x.md": "xxxx", "docs/sub/y.md": "y", "docsbis.md": "no" });
    const expected = {
      ok: true,
      output: {
        path: "docs",
        entries: [
          { name: "sub", type: "dir" },
          { name: "x.md", type: "file", size: 4 },
        ],
        truncated: false,
      },
      summary: "2 entries in docs",
    };
    for (const path of ["docs", "./docs/", "docs/sub/..", "img/../docs"]) {
      expect(await call(fsListDir, "ls-2", { path })).toEqual(expected);
    }
  });

  it("S4 §4 fs.list_dir defaults path to '.' and max_entries to 200", async () => {
    const files: Record<string, string> = {};
    for (let i = 0; i < 201; i++) files[`f${String(i).padStart(3, "0")}.txt`] = "x";
    await seed("ls-3", files);
    const outcome = await call(fsListDir, "ls-3", {});
    expect(outcome.ok).toBe(true);
    const output = (outcome as { output: { path: string; entries: { name: string }[]; truncated: boolean } }).output;
    expect(output.path).toBe(".");
    expect(output.entries).toHaveLength(200);
    expect(output.entries[0]?.name).toBe("f000.txt");
    expect(output.entries[199]?.name).toBe("f199.txt");
    expect(output.truncated).toBe(true);
    expect((outcome as { summary: string }).summary).toBe("200 entries in . (truncated)");
  });

  it("stops at max_entries, keeping the first by name, and says truncated", async () => {
    await seed("ls-4", { "e.txt": "", "d/x": "", "c.txt": "", "b/x": "", "a.txt": "" });
    expect(await call(fsListDir, "ls-4", { max_entries: 3 })).toEqual({
      ok: true,
      output: {
        path: ".",
        entries: [
          { name: "a.txt", type: "file", size: 0 },
          { name: "b", type: "dir" },
          { name: "c.txt", type: "file", size: 0 },
        ],
        truncated: true,
      },
      summary: "3 entries in . (truncated)",
    });
    const exact = await call(fsListDir, "ls-4", { max_entries: 5 });
    expect(exact).toMatchObject({ ok: true, output: { truncated: false }, summary: "5 entries in ." });
    const one = await call(fsListDir, "ls-4", { max_entries: 1 });
    expect(one).toMatchObject({ ok: true, output: { entries: [{ name: "a.txt" }], truncated: true }, summary: "1 entry in . (truncated)" });
  });

  it("pages through R2's 1000-key list pages with the cursor", async () => {
    const files: Record<string, string> = {};
    for (let i = 0; i < 1001; i++) files[`k${String(i).padStart(4, "0")}`] = "";
    await seed("ls-5", files);
    const all = await call(fsListDir, "ls-5", { max_entries: 1000 });
    const output = (all as { output: { entries: { name: string }[]; truncated: boolean } }).output;
    expect(output.entries).toHaveLength(1000);
    expect(output.entries[999]?.name).toBe("k0999");
    expect(output.truncated).toBe(true);
    const sub = await call(fsListDir, "ls-5", { max_entries: 1000, path: "nothing-here" });
    expect(sub).toMatchObject({ ok: true, output: { entries: [], truncated: false } });
  }, 60_000);

  it("another agent's files are invisible, even agents whose id extends this one", async () => {
    await seed("ls-6", { "mine.txt": "m" });
    await seed("ls-60", { "theirs.txt": "t" });
    await env.WORKSPACE.put("ls-6x.txt", "not in any workspace");
    expect(await call(fsListDir, "ls-6", {})).toEqual({
      ok: true,
      output: { path: ".", entries: [{ name: "mine.txt", type: "file", size: 1 }], truncated: false },
      summary: "1 entry in .",
    });
    expect(await call(fsListDir, "ls-6", { path: "../ls-60" })).toEqual(denied);
  });

  it("a path with nothing under it lists as empty (R2 has no directories)", async () => {
    expect(await call(fsListDir, "ls-7", { path: "nowhere/deeper" })).toEqual({
      ok: true,
      output: { path: "nowhere/deeper", entries: [], truncated: false },
      summary: "0 entries in nowhere/deeper",
    });
  });

  it("a path naming a file is tool.input_invalid", async () => {
    await seed("ls-8", { "a.md": "a" });
    expect(await call(fsListDir, "ls-8", { path: "a.md" })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: "a.md is a file, not a directory" },
    });
  });

  it("deny path escapes: policy.denied", async () => {
    for (const path of ["..", "/", "%2e%2e", "a\\b"]) expect(await call(fsListDir, "ls-9", { path })).toEqual(denied);
  });
});

describe("S4 §4 fs.read_text", () => {
  it("reads a UTF-8 file", async () => {
    await seed("rd-1", { "docs/notes.md": "héllo\n" });
    const expected = {
      ok: true,
      output: { path: "docs/notes.md", text: "héllo\n", bytes: 7, truncated: false },
      summary: "read 7 bytes from docs/notes.md",
    };
    expect(await call(fsReadText, "rd-1", { path: "docs/notes.md" })).toEqual(expected);
    expect(await call(fsReadText, "rd-1", { path: "./x/../docs//notes.md" })).toEqual(expected);
  });

  it("reads an empty file", async () => {
    await seed("rd-2", { "empty.txt": "" });
    expect(await call(fsReadText, "rd-2", { path: "empty.txt" })).toEqual({
      ok: true,
      output: { path: "empty.txt", text: "", bytes: 0, truncated: false },
      summary: "read 0 bytes from empty.txt",
    });
  });

  // "aé€😀": 1 + 2 + 3 + 4 bytes.
  const cuts: [number, string, boolean][] = [
    [1, "a", true],
    [2, "a", true],
    [3, "aé", true],
    [4, "aé", true],
    [5, "aé", true],
    [6, "aé€", true],
    [7, "aé€", true],
    [9, "aé€", true],
    [10, "aé€😀", false],
    [20_000, "aé€😀", false],
  ];
  for (const [maxBytes, text, truncated] of cuts) {
    it(`max_bytes ${maxBytes} cuts on a character boundary → ${JSON.stringify(text)}`, async () => {
      await seed("rd-3", { "multi.txt": "aé€😀" });
      const bytes = new TextEncoder().encode(text).length;
      expect(await call(fsReadText, "rd-3", { path: "multi.txt", max_bytes: maxBytes })).toEqual({
        ok: true,
        output: { path: "multi.txt", text, bytes, truncated },
        summary: truncated ? `read ${bytes} of 10 bytes from multi.txt` : `read ${bytes} bytes from multi.txt`,
      });
    });
  }

  it("S4 §4 fs.read_text defaults max_bytes to 20000", async () => {
    await seed("rd-4", { "big.txt": "x".repeat(25_000) });
    expect(await call(fsReadText, "rd-4", { path: "big.txt" })).toMatchObject({
      ok: true,
      output: { bytes: 20_000, truncated: true },
      summary: "read 20000 of 25000 bytes from big.txt",
    });
  });

  it("a missing file is tool.input_invalid", async () => {
    expect(await call(fsReadText, "rd-5", { path: "nope.md" })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: "no file at nope.md" },
    });
  });

  it("a directory or the root is tool.input_invalid", async () => {
    await seed("rd-6", { "docs/x.md": "x" });
    expect(await call(fsReadText, "rd-6", { path: "docs" })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: "docs is a directory; use fs.list_dir" },
    });
    expect(await call(fsReadText, "rd-6", { path: "." })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: "path names the workspace root, not a file" },
    });
  });

  it("binary content is tool.input_invalid: not a text file", async () => {
    await seed("rd-7", {
      "p.png": new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0xff, 0xfe]),
      "nul.bin": new Uint8Array([0x61, 0x00, 0x62]),
    });
    expect(await call(fsReadText, "rd-7", { path: "p.png" })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: "p.png is not a text file" },
    });
    expect(await call(fsReadText, "rd-7", { path: "nul.bin" })).toEqual({
      ok: false,
      error: { code: "tool.input_invalid", message: "nul.bin is not a text file" },
    });
  });

  it("deny path escapes: policy.denied, and another agent's file stays unread", async () => {
    await seed("rd-80", { "secret.md": "s" });
    for (const path of [
      "../rd-80/secret.md",
      "/rd-80/secret.md",
      "%2e%2e/rd-80/secret.md",
      "..\\rd-80\\secret.md",
      "a/../../rd-80/secret.md",
    ]) {
      expect(await call(fsReadText, "rd-8", { path })).toEqual(denied);
    }
  });
});

describe("S3 §1 error codes from the fs tools", () => {
  it("max_entries: 0 → tool.input_invalid naming the field", async () => {
    const outcome = await call(fsListDir, "inv-1", { max_entries: 0 });
    expect(outcome).toEqual({ ok: false, error: { code: "tool.input_invalid", message: expect.stringMatching(/^max_entries: /) } });
  });

  it("each invalid field is named", async () => {
    const messages = async (tool: ToolDefinition, input: Record<string, unknown>) => {
      const outcome = await call(tool, "inv-2", input);
      return outcome.ok ? "" : `${outcome.error.code} ${outcome.error.message}`;
    };
    expect(await messages(fsListDir, { max_entries: 1001 })).toMatch(/^tool\.input_invalid max_entries: /);
    expect(await messages(fsListDir, { max_entries: "10" })).toMatch(/^tool\.input_invalid max_entries: /);
    expect(await messages(fsListDir, { path: null })).toMatch(/^tool\.input_invalid path: /);
    expect(await messages(fsListDir, { recursive: true })).toBe('tool.input_invalid unknown field "recursive"');
    expect(await messages(fsReadText, {})).toMatch(/^tool\.input_invalid path: /);
    expect(await messages(fsReadText, { path: "a", max_bytes: 0 })).toMatch(/^tool\.input_invalid max_bytes: /);
    expect(await messages(fsReadText, { path: "a".repeat(1025) })).toMatch(/^tool\.input_invalid path: /);
    expect(await messages(fsReadText, { path: "a".repeat(1022) })).toBe("tool.input_invalid path is longer than 1024 bytes");
  });

  it("an aborted call (timeout or cancel) is timeout", async () => {
    await seed("abort-1", { "a.md": "a" });
    const signal = AbortSignal.abort();
    for (const [tool, input] of [
      [fsListDir, {}],
      [fsReadText, { path: "a.md" }],
    ] as const) {
      expect(await tool.handler(input, ctx("abort-1", signal))).toEqual({
        ok: false,
        error: { code: "timeout", message: `${tool.name} did not finish within 30000 ms or was cancelled`, retryable: true },
      });
    }
  });

  it("a call aborted while R2 is still answering is timeout", async () => {
    await seed("abort-2", { "a.md": "a" });
    const controller = new AbortController();
    const pending = fsReadText.handler({ path: "a.md" }, ctx("abort-2", controller.signal));
    controller.abort(new Error("timeout_ms elapsed"));
    expect(await pending).toMatchObject({ ok: false, error: { code: "timeout" } });
  });

  it("an agent id that cannot own a workspace is policy.denied", async () => {
    expect(await call(fsReadText, "Not/An/Agent", { path: "a.md" })).toEqual({
      ok: false,
      error: { code: "policy.denied", message: "this agent has no workspace" },
    });
  });
});

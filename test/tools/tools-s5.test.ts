/**
 * S5 contract tools (S5 "Tool Surface", §6.2, §6.3, §6.6; DESIGN "Where tools run"), each handler called
 * directly with a fake `SessionToolHost`: `verify`, `save_snapshot`, `automation.complete`,
 * `save_service_commands`, `save_env_files` and `request_env_variables` — their schemas at every
 * boundary, their storage (R2 keys and bytes, D1 rows) and their idempotency.
 */

import { env } from "cloudflare:workers";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { sha256Hex } from "../../src/prompts/hash";
import { BUILTIN_TOOLS } from "../../src/tools/builtin";
import { S5_TOOLS, s5WireArgs } from "../../src/tools/builtin/s5";
import type { AutomationCompletion, SessionToolHost, SessionType, ToolContext, ToolOutcome } from "../../src/tools/registry";
import { tools } from "../../src/tools/registry";
import { checkToolSchema } from "../../src/tools/schema-rules";

const NOW = "2025-06-01T12:00:00.000Z";
const S5_NAMES = ["verify", "save_snapshot", "automation.complete", "save_service_commands", "save_env_files", "request_env_variables"];

let seq = 0;
/** A fresh agent id per test (the R2 buckets and D1 are shared by the whole file). */
const agent = (name: string) => `s5-${name}-${++seq}`;
const hex32 = () => [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");

type FakeHost = SessionToolHost & { audits: [string, Record<string, unknown>][]; completions: Map<string, AutomationCompletion> };

/** A SessionToolHost as a SessionDO offers it: completions in a Map, audit events in an array. */
function host(over: { sessionType?: SessionType; runId?: string | null; runs?: string[]; sessionId?: string } = {}): FakeHost {
  const audits: [string, Record<string, unknown>][] = [];
  const completions = new Map<string, AutomationCompletion>();
  const runs = new Set(over.runs ?? ["run_auto1"]);
  return {
    sessionId: over.sessionId ?? `ses_${hex32()}`,
    sessionType: over.sessionType ?? "ordinary",
    runId: over.runId === undefined ? null : over.runId,
    audits,
    completions,
    checkpoint: () => ({ state: { step: "tests green", files: ["a.ts"] }, revision: 7, updated_ts: "2025-06-01T11:59:00.000Z" }),
    recordCompletion: (c) => {
      if (!runs.has(c.run_id)) return { status: "unknown_run" };
      const first = completions.get(c.completion_id);
      if (first) {
        const same = first.run_id === c.run_id && first.outcome === c.outcome && first.summary === c.summary;
        return same ? { status: "duplicate", completion: first } : { status: "conflict", completion: first };
      }
      const completion = { ...c, recorded_at: NOW };
      completions.set(c.completion_id, completion);
      return { status: "recorded", completion };
    },
    audit: (eventType, payload) => {
      audits.push([eventType, payload]);
    },
  };
}

function ctx(agentId: string, session: SessionToolHost | undefined, over: Partial<ToolContext> = {}): ToolContext {
  return {
    env,
    agentId,
    runId: "run_engine",
    sessionKey: `agent:${agentId}:http:room1:dm:user1`,
    channel: "http",
    toolCallId: "call_1",
    capabilities: [],
    signal: new AbortController().signal,
    timeoutMs: 30_000,
    session,
    ...over,
  };
}

function call(name: string, args: unknown, c: ToolContext): Promise<ToolOutcome> {
  const tool = tools.get(name);
  if (!tool) throw new Error(`no tool ${name}`);
  return tool.handler(args as Record<string, unknown>, c);
}

const invalid = (message: string) => ({ ok: false, error: { code: "tool.input_invalid", message } });
const seed = (agentId: string, files: Record<string, string | Uint8Array>) =>
  Promise.all(Object.entries(files).map(([path, body]) => env.WORKSPACE.put(`${agentId}/${path}`, body)));
const auditKeys = async (prefix: string) => (await env.AUDIT.list({ prefix })).objects.map((o) => o.key);
const auditText = async (key: string) => (await env.AUDIT.get(key))?.text();

beforeEach(() => {
  vi.useFakeTimers({ toFake: ["Date"] });
  vi.setSystemTime(new Date(NOW));
});
afterEach(() => {
  vi.useRealTimers();
});

// -------------------------------------------------------------------------------------------------

describe("S5 Tool Surface: the six tools are registered", () => {
  it("names exact, all draft_only, setup-only exactly save_service_commands and save_env_files", () => {
    expect(S5_TOOLS.map((t) => [t.name, t.risk, t.setupOnly ?? false])).toEqual([
      ["verify", "draft_only", false],
      ["save_snapshot", "draft_only", false],
      ["automation.complete", "draft_only", false],
      ["save_service_commands", "draft_only", true],
      ["save_env_files", "draft_only", true],
      ["request_env_variables", "draft_only", false],
    ]);
    for (const def of S5_TOOLS) {
      expect(BUILTIN_TOOLS).toContain(def);
      expect(tools.get(def.name)).toBe(def);
    }
  });

  it("S5 §6.2: the gateway supports both automation.complete and automation_complete", () => {
    expect(tools.get("automation_complete")).toBe(tools.get("automation.complete"));
    expect(tools.get("automation.complete")?.aliases).toEqual(["automation_complete"]);
  });

  it("S1 §3.1: every S5 tool's JSON Schema passes the schema rules (strict object, no `format` property, described)", () => {
    for (const name of S5_NAMES) expect([name, checkToolSchema(tools.get(name)?.parameters)]).toEqual([name, []]);
    // The S5 `format` field is offered as `file_format`.
    const envFiles = tools.get("save_env_files")?.parameters as { properties: { files: { items: { properties: object } } } };
    expect(Object.keys(envFiles.properties.files.items.properties)).toEqual(["path", "workspacePath", "file_format", "mode", "keys"]);
  });

  it("S5 §6.2 schema invariants: required fields as the contract names them", () => {
    const required = (name: string) => ((tools.get(name)?.parameters ?? {}) as { required?: string[] }).required ?? [];
    expect(S5_NAMES.map((n) => [n, required(n)])).toEqual([
      ["verify", []],
      ["save_snapshot", []],
      ["automation.complete", ["run_id", "completion_id", "outcome"]],
      ["save_service_commands", ["commands"]],
      ["save_env_files", ["files"]],
      ["request_env_variables", ["keys"]],
    ]);
  });
});

describe("S5 gateway-mediated tools need the session's side of the call", () => {
  const valid: Record<string, unknown> = {
    verify: {},
    save_snapshot: {},
    "automation.complete": { run_id: "run_auto1", completion_id: "c1", outcome: "succeeded" },
    save_service_commands: { commands: [{ name: "web", command: "npm run dev" }] },
    save_env_files: { files: [{ path: ".env", file_format: "dotenv", mode: "secret", keys: [{ key: "API_KEY" }] }] },
    request_env_variables: { keys: [{ key: "API_KEY" }] },
  };
  for (const name of S5_NAMES) {
    it(`${name} without ctx.session → sandbox.unavailable`, async () => {
      expect(await call(name, valid[name], ctx(agent("nosession"), undefined))).toEqual({
        ok: false,
        error: { code: "sandbox.unavailable", message: `${name} runs only inside a session` },
      });
    });
  }
});

// -------------------------------------------------------------------------------------------------

describe("verify: copies evidence files from a workspace folder into the run bundle", () => {
  const files = { "result.txt": "all 42 tests passed\n", "shots/home.png": new Uint8Array([137, 80, 78, 71, 0, 1, 2, 3]), "log.txt": "ok" };

  it("with a run: copies every file under .verification/ to agents/{agent}/runs/{run}/evidence/{tool_call_id}/", async () => {
    const a = agent("verify");
    await seed(a, {
      ...Object.fromEntries(Object.entries(files).map(([p, b]) => [`.verification/${p}`, b])),
      "other/x.txt": "not evidence",
    });
    const h = host({ runId: "run_v1" });
    const out = await call("verify", {}, ctx(a, h, { toolCallId: "call_v1" }));
    const prefix = `agents/${a}/runs/run_v1/evidence/call_v1/`;
    const sha = (b: string | Uint8Array) => sha256Hex(b);
    expect(out).toEqual({
      ok: true,
      output: {
        folder: ".verification",
        files: [
          { path: "log.txt", bytes: 2, sha256: await sha("ok") },
          { path: "result.txt", bytes: 20, sha256: await sha("all 42 tests passed\n") },
          { path: "shots/home.png", bytes: 8, sha256: await sha(files["shots/home.png"]) },
        ],
        prefix,
      },
      summary: "copied 3 evidence files (30 bytes)",
    });
    expect(await auditKeys(prefix)).toEqual([`${prefix}log.txt`, `${prefix}result.txt`, `${prefix}shots/home.png`]);
    expect(await auditText(`${prefix}result.txt`)).toBe("all 42 tests passed\n");
    expect(new Uint8Array((await (await env.AUDIT.get(`${prefix}shots/home.png`))?.arrayBuffer()) ?? [])).toEqual(files["shots/home.png"]);
    expect(h.audits).toEqual([["tool.verify", { folder: ".verification", files: 3, prefix }]]);
  });

  it("without a run: copies to the session's evidence folder, agents/{agent}/sessions/{encoded session key}/evidence/{tool_call_id}/", async () => {
    const a = agent("verify");
    await seed(a, { ".verification/a.txt": "A" });
    const c = ctx(a, host(), { toolCallId: "call_s1" });
    const out = await call("verify", {}, c);
    const prefix = `agents/${a}/sessions/${encodeURIComponent(c.sessionKey)}/evidence/call_s1/`;
    expect(prefix).toBe(`agents/${a}/sessions/agent%3A${a}%3Ahttp%3Aroom1%3Adm%3Auser1/evidence/call_s1/`);
    expect(out).toMatchObject({ ok: true, output: { prefix }, summary: "copied 1 evidence file (1 byte)" });
    expect(await auditText(`${prefix}a.txt`)).toBe("A");
  });

  it("the tool_call_id is one key segment of the evidence prefix: percent-encoded, and never . or ..", async () => {
    const a = agent("verify");
    await seed(a, { ".verification/a.txt": "A" });
    const h = host({ runId: "run_k" });
    for (const [id, segment] of [
      ["a/b", "a%2Fb"],
      ["..", "%2E%2E"],
      [".", "%2E"],
      ["call.1", "call.1"],
    ]) {
      expect(await call("verify", {}, ctx(a, h, { toolCallId: id }))).toMatchObject({
        ok: true,
        output: { prefix: `agents/${a}/runs/run_k/evidence/${segment}/` },
      });
    }
  });

  it("{ folder } picks another workspace folder, normalised like the fs tools' paths", async () => {
    const a = agent("verify");
    await seed(a, { "out/evidence/r.json": "{}", ".verification/x": "x" });
    const out = await call("verify", { folder: "./out//evidence/" }, ctx(a, host({ runId: "run_f" }), { toolCallId: "call_f" }));
    expect(out).toMatchObject({ ok: true, output: { folder: "out/evidence", files: [{ path: "r.json", bytes: 2 }] } });
    expect(await auditKeys(`agents/${a}/runs/run_f/`)).toEqual([`agents/${a}/runs/run_f/evidence/call_f/r.json`]);
  });

  it("a folder that escapes the workspace is policy.denied, as in the fs tools; the root and bad input are tool.input_invalid", async () => {
    const a = agent("verify");
    const denied = { ok: false, error: { code: "policy.denied", message: "folder escapes the workspace" } };
    for (const folder of ["../other-agent", "/etc", "a/../../b", "%2e%2e", "C:/x", "a\\b"]) {
      expect([folder, await call("verify", { folder }, ctx(a, host()))]).toEqual([folder, denied]);
    }
    for (const folder of [".", "a/.."]) {
      expect(await call("verify", { folder }, ctx(a, host()))).toEqual(
        invalid("folder names the workspace root; pass a folder such as .verification"),
      );
    }
    expect(await call("verify", { folder: "" }, ctx(a, host()))).toEqual(
      invalid("folder: Too small: expected string to have >=1 characters"),
    );
    expect(await call("verify", { folder: ".v", extra: 1 }, ctx(a, host()))).toEqual(invalid('unknown field "extra"'));
  });

  it("an empty folder fails with an actionable message", async () => {
    const a = agent("verify");
    await seed(a, { "elsewhere.txt": "x", ".verification-old/x.txt": "x" });
    const h = host();
    expect(await call("verify", {}, ctx(a, h))).toEqual(invalid("no files in .verification/ — write evidence files there first"));
    expect(await call("verify", { folder: "proof" }, ctx(a, h))).toEqual(invalid("no files in proof/ — write evidence files there first"));
    expect(h.audits).toEqual([]);
  });

  it("create-only: a retry of the same call (same bytes) succeeds again; changed bytes under the same call fail and nothing is replaced", async () => {
    const a = agent("verify");
    await seed(a, { ".verification/r.txt": "first" });
    const h = host({ runId: "run_r" });
    const c = ctx(a, h, { toolCallId: "call_r" });
    const first = await call("verify", {}, c);
    expect(await call("verify", {}, c)).toEqual(first);
    await seed(a, { ".verification/r.txt": "second" });
    expect(await call("verify", {}, c)).toEqual({
      ok: false,
      error: {
        code: "invalid.request",
        message: "evidence r.txt was already copied by this tool call with different content; evidence is never replaced",
      },
    });
    expect(await auditText(`agents/${a}/runs/run_r/evidence/call_r/r.txt`)).toBe("first");
    // A new tool call copies the new bytes under its own folder.
    expect(await call("verify", {}, ctx(a, h, { toolCallId: "call_r2" }))).toMatchObject({ ok: true });
    expect(await auditText(`agents/${a}/runs/run_r/evidence/call_r2/r.txt`)).toBe("second");
  });

  it("at most 20 files: 20 are copied, 21 fail and nothing is copied", async () => {
    const a = agent("verify");
    const twenty = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`.verification/f${String(i).padStart(2, "0")}.txt`, `${i}`]));
    await seed(a, twenty);
    const h = host({ runId: "run_n" });
    expect(await call("verify", {}, ctx(a, h, { toolCallId: "call_20" }))).toMatchObject({
      ok: true,
      summary: "copied 20 evidence files (30 bytes)",
    });
    expect(await auditKeys(`agents/${a}/runs/run_n/evidence/call_20/`)).toHaveLength(20);
    await seed(a, { ".verification/f20.txt": "20" });
    expect(await call("verify", {}, ctx(a, h, { toolCallId: "call_21" }))).toEqual(
      invalid(".verification/ holds more than 20 files; keep at most 20 evidence files there"),
    );
    expect(await auditKeys(`agents/${a}/runs/run_n/evidence/call_21/`)).toEqual([]);
  });

  it("each file at most 5 MiB, 20 MiB in all: over either limit fails before anything is copied", async () => {
    const a = agent("verify");
    const MiB = 1024 * 1024;
    const h = host({ runId: "run_big" });
    await seed(a, { "one/exact.bin": new Uint8Array(5 * MiB) });
    expect(await call("verify", { folder: "one" }, ctx(a, h, { toolCallId: "call_5m" }))).toMatchObject({
      ok: true,
      summary: "copied 1 evidence file (5.0 MiB)",
    });

    await seed(a, { "two/big.bin": new Uint8Array(5 * MiB + 1), "two/small.txt": "s" });
    expect(await call("verify", { folder: "two" }, ctx(a, h, { toolCallId: "call_big" }))).toEqual(
      invalid("two/big.bin is 5.0 MiB; each evidence file may be at most 5 MiB"),
    );
    expect(await auditKeys(`agents/${a}/runs/run_big/evidence/call_big/`)).toEqual([]);

    const four = Object.fromEntries(Array.from({ length: 4 }, (_, i) => [`three/f${i}.bin`, new Uint8Array(5 * MiB)]));
    await seed(a, four);
    expect(await call("verify", { folder: "three" }, ctx(a, h, { toolCallId: "call_20m" }))).toMatchObject({
      ok: true,
      summary: "copied 4 evidence files (20.0 MiB)",
    });
    await seed(a, { "three/one-more.txt": "x" });
    expect(await call("verify", { folder: "three" }, ctx(a, h, { toolCallId: "call_over" }))).toEqual(
      invalid("the files in three/ total 20.0 MiB; at most 20 MiB may be copied"),
    );
    expect(await auditKeys(`agents/${a}/runs/run_big/evidence/call_over/`)).toEqual([]);
  }, 30_000); // writes 25 MiB to local R2: about 1 s on a quiet machine, over 5 s on a loaded one

  it("a call whose signal fired answers timeout", async () => {
    const a = agent("verify");
    await seed(a, { ".verification/a.txt": "A" });
    const aborted = new AbortController();
    aborted.abort();
    expect(await call("verify", {}, ctx(a, host(), { signal: aborted.signal }))).toEqual({
      ok: false,
      error: { code: "timeout", message: "verify did not finish within 30000 ms or was cancelled", retryable: true },
    });
  });
});

// -------------------------------------------------------------------------------------------------

describe("save_snapshot: a named snapshot of the session checkpoint in R2", () => {
  it("writes {snapshot_id, session_key, session_id, run_id, message, created_at, checkpoint} to agents/{agent}/snapshots/{id}.json", async () => {
    const a = agent("snap");
    const h = host({ runId: "run_s" });
    const c = ctx(a, h, { toolCallId: "call_snap" });
    const id = `snap_${(await sha256Hex(`${c.sessionKey}\ncall_snap`)).slice(0, 24)}`;
    const key = `agents/${a}/snapshots/${id}.json`;
    expect(await call("save_snapshot", { message: "after setup" }, c)).toEqual({
      ok: true,
      output: { snapshot_id: id, key, revision: 7 },
      summary: `saved snapshot ${id} at checkpoint revision 7`,
    });
    expect(JSON.parse((await auditText(key)) ?? "null")).toEqual({
      snapshot_id: id,
      session_key: c.sessionKey,
      session_id: h.sessionId,
      run_id: "run_s",
      tool_call_id: "call_snap",
      message: "after setup",
      created_at: NOW,
      checkpoint: { state: { step: "tests green", files: ["a.ts"] }, revision: 7, updated_ts: "2025-06-01T11:59:00.000Z" },
    });
  });

  it("S5 §6.3 snapshot-boundary retries reuse the tool_call_id: the same call gets the same snapshot, stored once", async () => {
    const a = agent("snap");
    const h = host();
    const c = ctx(a, h, { toolCallId: "call_retry" });
    const first = await call("save_snapshot", { message: "one" }, c);
    expect(first.ok).toBe(true);
    const key = (first as { output: { key: string } }).output.key;
    const stored = await auditText(key);
    vi.setSystemTime(new Date("2025-06-01T12:05:00.000Z"));
    expect(await call("save_snapshot", { message: "one" }, c)).toEqual(first);
    expect(await auditText(key)).toBe(stored);
    expect(JSON.parse(stored ?? "null")).toMatchObject({ run_id: null, message: "one", created_at: NOW });
    // Another tool call, or the same call id in another session, is another snapshot.
    const other = await call("save_snapshot", {}, ctx(a, h, { toolCallId: "call_other" }));
    const elsewhere = await call("save_snapshot", {}, ctx(a, h, { toolCallId: "call_retry", sessionKey: `agent:${a}:main` }));
    const ids = [first, other, elsewhere].map((o) => (o as { output: { snapshot_id: string } }).output.snapshot_id);
    expect(new Set(ids).size).toBe(3);
    for (const id of ids) expect(id).toMatch(/^snap_[0-9a-f]{24}$/);
    expect(JSON.parse((await auditText(`agents/${a}/snapshots/${ids[1]}.json`)) ?? "null").message).toBeNull();
  });

  it("message: at most 1000 characters; nothing else is accepted", async () => {
    const a = agent("snap");
    expect(await call("save_snapshot", { message: "m".repeat(1000) }, ctx(a, host()))).toMatchObject({ ok: true });
    expect(await call("save_snapshot", { message: "m".repeat(1001) }, ctx(a, host()))).toEqual(
      invalid("message: Too big: expected string to have <=1000 characters"),
    );
    expect(await call("save_snapshot", { name: "x" }, ctx(a, host()))).toEqual(invalid('unknown field "name"'));
  });
});

// -------------------------------------------------------------------------------------------------

describe("automation.complete: finishes an automation run, idempotent by completion_id", () => {
  const args = { run_id: "run_auto1", completion_id: "cmp-1", outcome: "succeeded", summary: "deployed" };

  it("records the completion and returns it", async () => {
    const h = host();
    expect(await call("automation.complete", args, ctx(agent("auto"), h, { toolCallId: "call_c1" }))).toEqual({
      ok: true,
      output: {
        completion_id: "cmp-1",
        run_id: "run_auto1",
        outcome: "succeeded",
        summary: "deployed",
        tool_call_id: "call_c1",
        recorded_at: NOW,
      },
      summary: "automation run run_auto1 completed: succeeded",
    });
    expect([...h.completions.keys()]).toEqual(["cmp-1"]);
  });

  it("the alias automation_complete runs the same handler; summary is optional (null)", async () => {
    const h = host();
    const out = await call("automation_complete", { ...args, summary: undefined, outcome: "needs_human" }, ctx(agent("auto"), h));
    expect(out).toMatchObject({
      ok: true,
      output: { outcome: "needs_human", summary: null },
      summary: "automation run run_auto1 completed: needs_human",
    });
  });

  it("a duplicate completion_id with the same content returns the FIRST completion, marked duplicate", async () => {
    const h = host();
    const a = agent("auto");
    await call("automation.complete", args, ctx(a, h, { toolCallId: "call_first" }));
    expect(await call("automation.complete", args, ctx(a, h, { toolCallId: "call_second" }))).toEqual({
      ok: true,
      output: {
        completion_id: "cmp-1",
        run_id: "run_auto1",
        outcome: "succeeded",
        summary: "deployed",
        tool_call_id: "call_first",
        recorded_at: NOW,
        duplicate: true,
      },
      summary: "automation run run_auto1 was already completed: succeeded",
    });
  });

  it("the same completion_id with another outcome is a conflict (invalid.request)", async () => {
    const h = host({ runs: ["run_auto1", "run_auto2"] });
    const a = agent("auto");
    await call("automation.complete", args, ctx(a, h));
    const conflict = {
      ok: false,
      error: {
        code: "invalid.request",
        message: "completion_id cmp-1 was already recorded with a different run or outcome; use a new completion_id",
      },
    };
    expect(await call("automation.complete", { ...args, outcome: "failed" }, ctx(a, h))).toEqual(conflict);
    expect(await call("automation.complete", { ...args, run_id: "run_auto2" }, ctx(a, h))).toEqual(conflict);
    expect(h.completions.get("cmp-1")?.outcome).toBe("succeeded");
  });

  it("a run that is not a run of this session is refused (invalid.request)", async () => {
    expect(await call("automation.complete", { ...args, run_id: "run_elsewhere" }, ctx(agent("auto"), host()))).toEqual({
      ok: false,
      error: { code: "invalid.request", message: "run run_elsewhere is not a run of this session" },
    });
  });

  it("schema: run_id 1–200, completion_id 1–128 of [A-Za-z0-9_.:-], outcome enum, summary ≤ 20000, all three required", async () => {
    const c = () => ctx(agent("auto"), host({ runs: ["r".repeat(200), "run_auto1"] }));
    expect(await call("automation.complete", { ...args, run_id: "r".repeat(200) }, c())).toMatchObject({ ok: true });
    expect(await call("automation.complete", { ...args, completion_id: "A.b_c:d-9".padEnd(128, "x") }, c())).toMatchObject({
      ok: true,
    });
    expect(await call("automation.complete", { ...args, summary: "s".repeat(20_000) }, c())).toMatchObject({ ok: true });
    const refused: [Record<string, unknown>, string][] = [
      [{ ...args, run_id: "" }, "run_id: Too small: expected string to have >=1 characters"],
      [{ ...args, run_id: "r".repeat(201) }, "run_id: Too big: expected string to have <=200 characters"],
      [{ ...args, completion_id: "" }, "completion_id: Too small: expected string to have >=1 characters"],
      [{ ...args, completion_id: "x".repeat(129) }, "completion_id: Too big: expected string to have <=128 characters"],
      [{ ...args, completion_id: "has space" }, "completion_id: may contain only A-Z a-z 0-9 _ . : -"],
      [{ ...args, completion_id: "a/b" }, "completion_id: may contain only A-Z a-z 0-9 _ . : -"],
      [{ ...args, outcome: "done" }, 'outcome: Invalid option: expected one of "succeeded"|"failed"|"needs_human"'],
      [{ ...args, summary: "s".repeat(20_001) }, "summary: Too big: expected string to have <=20000 characters"],
      [{ completion_id: "c", outcome: "failed" }, "run_id: Invalid input: expected string, received undefined"],
      [{ ...args, extra: true }, 'unknown field "extra"'],
    ];
    for (const [input, message] of refused) expect(await call("automation.complete", input, c())).toEqual(invalid(message));
  });
});

// -------------------------------------------------------------------------------------------------

type SetupRow = { agent_id: string; kind: string; payload: string; session_id: string; tool_call_id: string; updated_at: string };
const setupRows = async (agentId: string) =>
  (await env.DB.prepare("SELECT * FROM setup_records WHERE agent_id = ?1 ORDER BY kind").bind(agentId).all<SetupRow>()).results;

describe("save_service_commands (setup-only): persists the service commands as a setup record", () => {
  const cmd = (i: number) => ({ name: `svc ${i}`, command: `npm run svc-${i}` });

  it("saves {commands} in setup_records (agent_id, kind service_commands) and answers {saved: n}", async () => {
    const a = agent("svc");
    const h = host({ sessionType: "setup" });
    const commands = [
      { name: "web", command: "npm run dev -- --port 3000", cwd: "apps/web", workspacePath: "frontend" },
      { name: "db.local_1", command: "docker compose up db" },
    ];
    expect(await call("save_service_commands", { commands }, ctx(a, h, { toolCallId: "call_svc" }))).toEqual({
      ok: true,
      output: { saved: 2 },
      summary: "saved 2 service commands",
    });
    expect(await setupRows(a)).toEqual([
      {
        agent_id: a,
        kind: "service_commands",
        payload: JSON.stringify({ commands }),
        session_id: h.sessionId,
        tool_call_id: "call_svc",
        updated_at: NOW,
      },
    ]);
  });

  it("a later save replaces the record (one row per agent and kind)", async () => {
    const a = agent("svc");
    const h = host({ sessionType: "setup" });
    await call("save_service_commands", { commands: [cmd(1), cmd(2)] }, ctx(a, h, { toolCallId: "call_a" }));
    vi.setSystemTime(new Date("2025-06-02T00:00:00.000Z"));
    expect(await call("save_service_commands", { commands: [cmd(3)] }, ctx(a, h, { toolCallId: "call_b" }))).toMatchObject({
      output: { saved: 1 },
      summary: "saved 1 service command",
    });
    expect(await setupRows(a)).toEqual([
      expect.objectContaining({
        payload: JSON.stringify({ commands: [cmd(3)] }),
        tool_call_id: "call_b",
        updated_at: "2025-06-02T00:00:00.000Z",
      }),
    ]);
  });

  it("S5 §6.2 setup-only, enforced at run time too: an ordinary session is policy.denied and nothing is stored", async () => {
    const a = agent("svc");
    expect(await call("save_service_commands", { commands: [cmd(1)] }, ctx(a, host({ sessionType: "ordinary" })))).toEqual({
      ok: false,
      error: { code: "policy.denied", message: "save_service_commands is available only in setup sessions" },
    });
    expect(await setupRows(a)).toEqual([]);
  });

  it("commands[]: 0 and 11 refused, 1 and 10 accepted", async () => {
    const c = () => ctx(agent("svc"), host({ sessionType: "setup" }));
    const list = (n: number) => Array.from({ length: n }, (_, i) => cmd(i));
    expect(await call("save_service_commands", { commands: list(0) }, c())).toEqual(
      invalid("commands: Too small: expected array to have >=1 items"),
    );
    expect(await call("save_service_commands", { commands: list(1) }, c())).toMatchObject({ ok: true, output: { saved: 1 } });
    expect(await call("save_service_commands", { commands: list(10) }, c())).toMatchObject({ ok: true, output: { saved: 10 } });
    expect(await call("save_service_commands", { commands: list(11) }, c())).toEqual(
      invalid("commands: Too big: expected array to have <=10 items"),
    );
  });

  it("name: 1–100 characters of letters, digits, space, _ . -, starting with a letter or digit; unique in the list", async () => {
    const c = () => ctx(agent("svc"), host({ sessionType: "setup" }));
    const one = (over: Record<string, unknown>) => ({ commands: [{ ...cmd(0), ...over }] });
    expect(await call("save_service_commands", one({ name: "A".repeat(100) }), c())).toMatchObject({ ok: true });
    expect(await call("save_service_commands", one({ name: "9 web_server-v1.2" }), c())).toMatchObject({ ok: true });
    const nameRule = "commands.0.name: must start with a letter or digit and contain only letters, digits, spaces, _ . -";
    const refused: [Record<string, unknown>, string][] = [
      [one({ name: "" }), `commands.0.name: Too small: expected string to have >=1 characters; ${nameRule}`],
      [one({ name: "A".repeat(101) }), "commands.0.name: Too big: expected string to have <=100 characters"],
      [one({ name: "-web" }), nameRule],
      [one({ name: " web" }), nameRule],
      [one({ name: "web/api" }), nameRule],
      [{ commands: [cmd(1), { name: "svc 1", command: "other" }] }, 'commands.1.name: duplicate name "svc 1"'],
    ];
    for (const [input, message] of refused) expect(await call("save_service_commands", input, c())).toEqual(invalid(message));
  });

  it("command: one line of 1–1000 characters", async () => {
    const c = () => ctx(agent("svc"), host({ sessionType: "setup" }));
    const one = (command: string) => ({ commands: [{ name: "web", command }] });
    expect(await call("save_service_commands", one("x".repeat(1000)), c())).toMatchObject({ ok: true });
    const refused: [string, string][] = [
      ["", "commands.0.command: Too small: expected string to have >=1 characters; commands.0.command: must be one line"],
      ["x".repeat(1001), "commands.0.command: Too big: expected string to have <=1000 characters"],
      ["npm run a\nnpm run b", "commands.0.command: must be one line"],
      ["npm run a\rx", "commands.0.command: must be one line"],
    ];
    for (const [command, message] of refused) expect(await call("save_service_commands", one(command), c())).toEqual(invalid(message));
  });

  it("cwd and workspacePath: relative paths of at most 500 characters — absolute and `..` refused", async () => {
    const c = () => ctx(agent("svc"), host({ sessionType: "setup" }));
    const rule = "must be a relative path without '..' segments";
    for (const field of ["cwd", "workspacePath"]) {
      const one = (p: string) => ({ commands: [{ name: "web", command: "run", [field]: p }] });
      for (const ok of ["apps/web", ".", "a..b/..c", "./x", "p".repeat(500)]) {
        expect([field, ok, await call("save_service_commands", one(ok), c())]).toMatchObject([field, ok, { ok: true }]);
      }
      for (const bad of ["/srv/app", "..", "../x", "a/../b", "a/..", "~", "~/app", "C:/x", "a\\b", "a\u0000b"]) {
        expect([field, bad, await call("save_service_commands", one(bad), c())]).toEqual([
          field,
          bad,
          invalid(`commands.0.${field}: ${rule}`),
        ]);
      }
      expect(await call("save_service_commands", one("p".repeat(501)), c())).toEqual(
        invalid(`commands.0.${field}: Too big: expected string to have <=500 characters`),
      );
    }
  });

  it("unknown fields are refused at every level", async () => {
    const c = () => ctx(agent("svc"), host({ sessionType: "setup" }));
    expect(await call("save_service_commands", { commands: [{ ...cmd(1), env: "X=1" }] }, c())).toEqual(invalid('unknown field "env"'));
    expect(await call("save_service_commands", { commands: [cmd(1)], replace: true }, c())).toEqual(invalid('unknown field "replace"'));
  });
});

// -------------------------------------------------------------------------------------------------

describe("save_env_files (setup-only): persists env-file specs, never secret values (S5 §6.6)", () => {
  const file = (over: Record<string, unknown> = {}) => ({
    path: ".env.local",
    file_format: "dotenv",
    mode: "secret",
    keys: [{ key: "DATABASE_URL", required: true, description: "Postgres connection string" }, { key: "API_KEY" }],
    ...over,
  });
  const keys = (n: number) => Array.from({ length: n }, (_, i) => ({ key: `KEY_${i}` }));

  it("saves the spec in setup_records (kind env_files) in S5's shape (format: dotenv) and answers {saved: n}", async () => {
    const a = agent("env");
    const h = host({ sessionType: "setup" });
    const out = await call(
      "save_env_files",
      { files: [file(), file({ path: "api/.env", workspacePath: "backend", keys: keys(1) })] },
      ctx(a, h, { toolCallId: "call_env" }),
    );
    expect(out).toEqual({ ok: true, output: { saved: 2 }, summary: "saved 2 env files with 3 keys" });
    expect(await setupRows(a)).toEqual([
      {
        agent_id: a,
        kind: "env_files",
        payload: JSON.stringify({
          files: [
            {
              path: ".env.local",
              format: "dotenv",
              mode: "secret",
              keys: [{ key: "DATABASE_URL", required: true, description: "Postgres connection string" }, { key: "API_KEY" }],
            },
            { path: "api/.env", workspacePath: "backend", format: "dotenv", mode: "secret", keys: [{ key: "KEY_0" }] },
          ],
        }),
        session_id: h.sessionId,
        tool_call_id: "call_env",
        updated_at: NOW,
      },
    ]);
  });

  it("S5 §6.2 setup-only, enforced at run time too: an ordinary session is policy.denied and nothing is stored", async () => {
    const a = agent("env");
    expect(await call("save_env_files", { files: [file()] }, ctx(a, host({ sessionType: "ordinary" })))).toEqual({
      ok: false,
      error: { code: "policy.denied", message: "save_env_files is available only in setup sessions" },
    });
    expect(await setupRows(a)).toEqual([]);
  });

  it("S5 §6.6 never secret values: a `value` anywhere is refused and nothing is stored", async () => {
    const a = agent("env");
    const secret = "sk-live-CANARY-0123456789";
    const attempts = [
      { files: [file({ keys: [{ key: "API_KEY", value: secret }] })] },
      { files: [file({ value: secret })] },
      { files: [file()], value: secret },
      { files: [file({ values: { API_KEY: secret } })] },
    ];
    const expected = ['unknown field "value"', 'unknown field "value"', 'unknown field "value"', 'unknown field "values"'];
    for (const [i, input] of attempts.entries()) {
      const out = await call("save_env_files", input, ctx(a, host({ sessionType: "setup" })));
      expect(out).toEqual(invalid(expected[i] ?? ""));
      expect(JSON.stringify(out)).not.toContain(secret);
    }
    expect(await setupRows(a)).toEqual([]);
    const anywhere = await env.DB.prepare("SELECT count(*) AS n FROM setup_records WHERE payload LIKE ?1").bind(`%${secret}%`).first("n");
    expect(anywhere).toBe(0);
  });

  it("files[]: 0 and 11 refused, 1 and 10 accepted; paths unique", async () => {
    const c = () => ctx(agent("env"), host({ sessionType: "setup" }));
    const list = (n: number) => Array.from({ length: n }, (_, i) => file({ path: `.env.${i}` }));
    expect(await call("save_env_files", { files: list(0) }, c())).toEqual(invalid("files: Too small: expected array to have >=1 items"));
    expect(await call("save_env_files", { files: list(1) }, c())).toMatchObject({ ok: true, output: { saved: 1 } });
    expect(await call("save_env_files", { files: list(10) }, c())).toMatchObject({ ok: true, output: { saved: 10 } });
    expect(await call("save_env_files", { files: list(11) }, c())).toEqual(invalid("files: Too big: expected array to have <=10 items"));
    expect(await call("save_env_files", { files: [file(), file()] }, c())).toEqual(invalid('files.1.path: duplicate path ".env.local"'));
    // The same path in two repositories of a workspace is two files.
    expect(await call("save_env_files", { files: [file(), file({ workspacePath: "api" })] }, c())).toMatchObject({ ok: true });
  });

  it("keys[]: 0 and 51 refused, 1 and 50 accepted; key names [A-Za-z_][A-Za-z0-9_]{0,127}, unique in a file; description ≤ 500", async () => {
    const c = () => ctx(agent("env"), host({ sessionType: "setup" }));
    const withKeys = (k: unknown[]) => ({ files: [file({ keys: k })] });
    expect(await call("save_env_files", withKeys(keys(0)), c())).toEqual(
      invalid("files.0.keys: Too small: expected array to have >=1 items"),
    );
    expect(await call("save_env_files", withKeys(keys(1)), c())).toMatchObject({ ok: true });
    expect(await call("save_env_files", withKeys(keys(50)), c())).toMatchObject({ ok: true, summary: "saved 1 env file with 50 keys" });
    expect(await call("save_env_files", withKeys(keys(51)), c())).toEqual(
      invalid("files.0.keys: Too big: expected array to have <=50 items"),
    );
    expect(await call("save_env_files", withKeys([{ key: `_${"a".repeat(127)}` }]), c())).toMatchObject({ ok: true });
    const rule = "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)";
    for (const key of ["", "1ABC", "A-B", "A B", `_${"a".repeat(128)}`, "ÄPI"]) {
      expect([key, await call("save_env_files", withKeys([{ key }]), c())]).toEqual([key, invalid(`files.0.keys.0.key: ${rule}`)]);
    }
    expect(await call("save_env_files", withKeys([{ key: "A" }, { key: "A" }]), c())).toEqual(
      invalid('files.0.keys.1.key: duplicate key "A"'),
    );
    expect(await call("save_env_files", withKeys([{ key: "A", description: "d".repeat(500) }]), c())).toMatchObject({ ok: true });
    expect(await call("save_env_files", withKeys([{ key: "A", description: "d".repeat(501) }]), c())).toEqual(
      invalid("files.0.keys.0.description: Too big: expected string to have <=500 characters"),
    );
  });

  it("relative paths only: path and workspacePath absolute or with `..` are refused; at most 500 characters", async () => {
    const c = () => ctx(agent("env"), host({ sessionType: "setup" }));
    const rule = "must be a relative path without '..' segments";
    for (const field of ["path", "workspacePath"]) {
      for (const bad of ["/etc/app.env", "../.env", "a/../.env", "~/.env", "D:\\x", ".."]) {
        expect([field, bad, await call("save_env_files", { files: [file({ [field]: bad })] }, c())]).toEqual([
          field,
          bad,
          invalid(`files.0.${field}: ${rule}`),
        ]);
      }
      expect(await call("save_env_files", { files: [file({ [field]: "e".repeat(500) })] }, c())).toMatchObject({ ok: true });
      expect(await call("save_env_files", { files: [file({ [field]: "e".repeat(501) })] }, c())).toEqual(
        invalid(`files.0.${field}: Too big: expected string to have <=500 characters`),
      );
    }
  });

  it("format=dotenv and mode=secret are the only values", async () => {
    const c = () => ctx(agent("env"), host({ sessionType: "setup" }));
    expect(await call("save_env_files", { files: [file({ file_format: "json" })] }, c())).toEqual(
      invalid('files.0.file_format: Invalid input: expected "dotenv"'),
    );
    expect(await call("save_env_files", { files: [file({ mode: "plain" })] }, c())).toEqual(
      invalid('files.0.mode: Invalid input: expected "secret"'),
    );
  });

  it("S1 §3.1 × S5: the wire field `format` maps to `file_format` (s5WireArgs); unmapped, `format` is an unknown field", async () => {
    const c = () => ctx(agent("env"), host({ sessionType: "setup" }));
    const wire = { files: [{ path: ".env", format: "dotenv", mode: "secret", keys: [{ key: "API_KEY" }] }], note: "kept" };
    const wireCopy = structuredClone(wire);
    const mapped = s5WireArgs("save_env_files", wire);
    expect(mapped).toEqual({ files: [{ path: ".env", file_format: "dotenv", mode: "secret", keys: [{ key: "API_KEY" }] }], note: "kept" });
    expect(wire).toEqual(wireCopy); // the caller's args are not changed
    const { note: _note, ...mappedArgs } = mapped as Record<string, unknown>;
    expect(await call("save_env_files", mappedArgs, c())).toMatchObject({ ok: true, output: { saved: 1 } });
    const { note: _n, ...raw } = wire;
    expect(await call("save_env_files", raw, c())).toEqual(
      invalid('files.0.file_format: Invalid input: expected "dotenv"; unknown field "format"'),
    );
    // Already model-shaped args, odd shapes and every other tool pass through untouched.
    const modelShaped = { files: [file()] };
    expect(s5WireArgs("save_env_files", modelShaped)).toEqual(modelShaped);
    const both = { files: [{ ...file(), format: "dotenv" }] };
    expect(s5WireArgs("save_env_files", both)).toEqual(both);
    for (const odd of [null, "x", [1], { files: "nope" }, { files: [1, null] }]) expect(s5WireArgs("save_env_files", odd)).toEqual(odd);
    const other = { files: [{ format: "dotenv" }] };
    expect(s5WireArgs("request_env_variables", other)).toBe(other);
    expect(s5WireArgs("verify", { folder: "x" })).toEqual({ folder: "x" });
  });
});

// -------------------------------------------------------------------------------------------------

describe("request_env_variables: records a request and returns at once (S5 §6.6)", () => {
  type EnvRequestRow = {
    id: string;
    agent_id: string;
    session_id: string;
    run_id: string | null;
    tool_call_id: string;
    keys: string;
    status: string;
    created_at: string;
  };
  const requestRows = async (agentId: string) =>
    (await env.DB.prepare("SELECT * FROM env_requests WHERE agent_id = ?1 ORDER BY created_at, id").bind(agentId).all<EnvRequestRow>())
      .results;
  const keys = (n: number) => Array.from({ length: n }, (_, i) => ({ key: `KEY_${i}` }));

  it("inserts an open env_requests row and answers {request_id, status: recorded, keys: n} — in any session type", async () => {
    const a = agent("req");
    const h = host({ runId: "run_q", sessionType: "ordinary" });
    const requested = [
      { key: "STRIPE_KEY", type: "secret", required: true, description: "Stripe test key", suggestions: ["sk_test_…"] },
      { key: "REGION", type: "env", suggestions: ["eu-west-1", "us-east-1"] },
    ];
    const out = await call("request_env_variables", { keys: requested }, ctx(a, h, { toolCallId: "call_q" }));
    expect(out).toMatchObject({ ok: true, output: { status: "recorded", keys: 2 } });
    const id = (out as { output: { request_id: string } }).output.request_id;
    expect(id).toMatch(/^envreq_[0-9a-f]{24}$/);
    expect(out).toEqual({
      ok: true,
      output: { request_id: id, status: "recorded", keys: 2 },
      summary: `requested 2 environment variables (${id}); the values arrive later`,
    });
    expect(await requestRows(a)).toEqual([
      {
        id,
        agent_id: a,
        session_id: h.sessionId,
        run_id: "run_q",
        tool_call_id: "call_q",
        keys: JSON.stringify(requested),
        status: "open",
        created_at: NOW,
      },
    ]);
  });

  it("idempotent per tool call: the same session and tool_call_id return the same request; another call is another request", async () => {
    const a = agent("req");
    const h = host();
    const first = await call("request_env_variables", { keys: keys(2) }, ctx(a, h, { toolCallId: "call_same" }));
    const again = await call("request_env_variables", { keys: keys(2) }, ctx(a, h, { toolCallId: "call_same" }));
    expect(again).toEqual(first);
    const other = await call("request_env_variables", { keys: keys(1) }, ctx(a, h, { toolCallId: "call_next" }));
    const otherSession = await call("request_env_variables", { keys: keys(1) }, ctx(a, host(), { toolCallId: "call_same" }));
    const ids = [first, other, otherSession].map((o) => (o as { output: { request_id: string } }).output.request_id);
    expect(new Set(ids).size).toBe(3);
    expect((await requestRows(a)).map((r) => [r.tool_call_id, r.run_id, JSON.parse(r.keys).length])).toEqual(
      expect.arrayContaining([
        ["call_same", null, 2],
        ["call_next", null, 1],
        ["call_same", null, 1],
      ]),
    );
    expect(await requestRows(a)).toHaveLength(3);
  });

  it("keys[]: 0 and 51 refused, 1 and 50 accepted; type env|secret; suggestions ≤ 10 of ≤ 200 characters; description ≤ 500; keys unique", async () => {
    const c = () => ctx(agent("req"), host());
    expect(await call("request_env_variables", { keys: keys(0) }, c())).toEqual(
      invalid("keys: Too small: expected array to have >=1 items"),
    );
    expect(await call("request_env_variables", { keys: keys(1) }, c())).toMatchObject({ ok: true, output: { keys: 1 } });
    expect(await call("request_env_variables", { keys: keys(50) }, c())).toMatchObject({ ok: true, output: { keys: 50 } });
    expect(await call("request_env_variables", { keys: keys(51) }, c())).toEqual(
      invalid("keys: Too big: expected array to have <=50 items"),
    );
    const one = (over: Record<string, unknown>) => ({ keys: [{ key: "A", ...over }] });
    const tenSuggestions = Array.from({ length: 10 }, (_, i) => `v${i}`.padEnd(200, "x"));
    expect(await call("request_env_variables", one({ suggestions: tenSuggestions, description: "d".repeat(500) }), c())).toMatchObject({
      ok: true,
    });
    const refused: [Record<string, unknown>, string][] = [
      [one({ type: "plain" }), 'keys.0.type: Invalid option: expected one of "env"|"secret"'],
      [one({ suggestions: [...tenSuggestions, "x"] }), "keys.0.suggestions: Too big: expected array to have <=10 items"],
      [one({ suggestions: ["s".repeat(201)] }), "keys.0.suggestions.0: Too big: expected string to have <=200 characters"],
      [one({ description: "d".repeat(501) }), "keys.0.description: Too big: expected string to have <=500 characters"],
      [one({ required: "yes" }), "keys.0.required: Invalid input: expected boolean, received string"],
      [one({ key: "9X" }), "keys.0.key: must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)"],
      [one({ value: "secret" }), 'unknown field "value"'],
      [{ keys: [{ key: "A" }, { key: "A" }] }, 'keys.1.key: duplicate key "A"'],
    ];
    for (const [input, message] of refused) expect(await call("request_env_variables", input, c())).toEqual(invalid(message));
  });
});

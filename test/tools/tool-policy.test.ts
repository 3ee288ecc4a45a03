/**
 * The policy engine as a pure function (S1 §3.2, §3.3) and the schema-drift guard: every outcome, in
 * the order the rules apply, with the exact decision record.
 */
import { describe, expect, it } from "vitest";
import { bundledConfig } from "../../src/config/load";
import { buildRunSpec } from "../../src/runs/spec";
import { decide, type GateInput, type ToolPolicy } from "../../src/tools/policy";
import { type ToolDefinition, ToolRegistry, tools } from "../../src/tools/registry";
import "../../src/tools/builtin";
import { TOOL_SCHEMA_LOCK } from "../../src/generated/tool-lock";
import { lockedSchemaHash, schemaHash } from "../../src/tools/schema-lock";

const tool = (name: string, risk: ToolDefinition["risk"], aliases?: string[]): ToolDefinition => ({
  name,
  ...(aliases ? { aliases } : {}),
  description: name,
  parameters: { type: "object", properties: {}, additionalProperties: false },
  risk,
  handler: async () => ({ ok: true, output: null }),
});

const registry = new ToolRegistry()
  .register(tool("doc.read", "read_only", ["doc.cat"]))
  .register(tool("doc.draft", "draft_only"))
  .register(tool("doc.send", "side_effect"));

const policy: ToolPolicy = { id: "p1", risks: ["read_only", "draft_only", "side_effect"], approvalRequired: ["side_effect"], channels: {} };
const input = (over: Partial<GateInput>): GateInput => ({
  calledAs: "doc.read",
  registry,
  agentId: "main",
  allow: ["doc.read", "doc.draft", "doc.send"],
  channel: "http",
  policy,
  ...over,
});

describe("S1 §3.2 allowlists, fail-closed", () => {
  it("an allowlisted read_only tool is allowed, and the decision names channel, risk, policy id and outcome", () => {
    expect(decide(input({}))).toEqual({
      outcome: "allowed",
      code: null,
      reason: "allowlisted",
      tool: "doc.read",
      risk: "read_only",
      channel: "http",
      policy_id: "p1",
    });
  });

  it("an alias resolves to its tool and is allowed when the tool is allowlisted (and vice versa)", () => {
    expect(decide(input({ calledAs: "doc.cat" })).outcome).toBe("allowed");
    expect(decide(input({ calledAs: "doc.read", allow: ["doc.cat"] })).outcome).toBe("allowed");
  });

  it("unknown tool → denied with tool.not_found", () => {
    expect(decide(input({ calledAs: "doc.nope" }))).toMatchObject({
      outcome: "denied",
      code: "tool.not_found",
      reason: 'no tool named "doc.nope"',
      risk: null,
    });
  });

  it("not on the agent's allowlist → policy.denied (an empty allowlist denies everything)", () => {
    expect(decide(input({ allow: [] }))).toMatchObject({
      outcome: "denied",
      code: "policy.denied",
      reason: 'doc.read is not allowed for agent "main"',
    });
  });

  it("allowlist by channel: a tool limited to other channels is denied here", () => {
    const d = decide(input({ policy: { ...policy, channels: { "doc.read": ["slack", "telegram"] } } }));
    expect(d).toMatchObject({ outcome: "denied", reason: 'doc.read is not allowed on channel "http" (allowed: slack, telegram)' });
    expect(decide(input({ channel: "slack", policy: { ...policy, channels: { "doc.read": ["slack"] } } })).outcome).toBe("allowed");
  });

  it("allowlist by risk class: a class not in policy.risks is denied", () => {
    expect(decide(input({ calledAs: "doc.draft", policy: { ...policy, risks: ["read_only"] } }))).toMatchObject({
      outcome: "denied",
      reason: "doc.draft is draft_only, a risk class this gateway does not allow",
    });
  });
});

describe("S1 §3.3 approvals and the schema-drift guard", () => {
  it("side_effect → requires_approval; draft_only → allowed (Phase 1)", () => {
    expect(decide(input({ calledAs: "doc.send" }))).toMatchObject({
      outcome: "requires_approval",
      reason: "doc.send is side_effect: it needs a human approval",
    });
    expect(decide(input({ calledAs: "doc.draft" })).outcome).toBe("allowed");
  });

  it("a schema that differs from the lock turns an allowed tool into requires_approval; a matching one does not", () => {
    expect(decide(input({ schemaHash: "a".repeat(64), lockedHash: "b".repeat(64) }))).toMatchObject({
      outcome: "requires_approval",
      reason: "doc.read's parameters changed since the policy was written (schema drift): a human must approve until the lock is updated",
    });
    expect(decide(input({ schemaHash: "a".repeat(64), lockedHash: "a".repeat(64) })).outcome).toBe("allowed");
    expect(decide(input({ schemaHash: "a".repeat(64), lockedHash: undefined })).outcome).toBe("allowed");
  });

  it("denials win over drift: a tool that is not allowlisted stays denied whatever its schema", () => {
    expect(decide(input({ allow: [], schemaHash: "a".repeat(64), lockedHash: "b".repeat(64) })).outcome).toBe("denied");
  });

  it("config/tool-schemas.lock.json pins every built-in tool's current schema (npm run tools:lock after a reviewed change)", async () => {
    const builtins = tools.list().filter((d) => !d.name.startsWith("test."));
    const current = Object.fromEntries(await Promise.all(builtins.map(async (d) => [d.name, await schemaHash(d)] as const)));
    expect(TOOL_SCHEMA_LOCK).toEqual(current);
    for (const d of builtins) expect(lockedSchemaHash(d.name)).toBe(current[d.name]);
  });
});

describe("shipped defaults: the bundled config's agent main", () => {
  it("fs.* and email.draft allowed; http.get allowed (capability-gated inside); message.send and fs.write_text need approval; shell.exec off", () => {
    const config = bundledConfig();
    const spec = buildRunSpec(config, "main", "http");
    const outcome = (tool: string) =>
      decide({ calledAs: tool, registry: tools, agentId: "main", allow: spec.tools, channel: "http", policy: spec.policy }).outcome;
    expect(
      Object.fromEntries(
        [
          "fs.read_text",
          "fs.read",
          "fs.list_dir",
          "email.draft",
          "http.get",
          "fs.write_text",
          "fs.write",
          "message.send",
          "shell.exec",
        ].map((t) => [t, outcome(t)]),
      ),
    ).toEqual({
      "fs.read_text": "allowed",
      "fs.read": "allowed",
      "fs.list_dir": "allowed",
      "email.draft": "allowed",
      "http.get": "allowed",
      "fs.write_text": "requires_approval",
      "fs.write": "requires_approval",
      "message.send": "requires_approval",
      "shell.exec": "denied",
    });
    expect(spec.policy.id).toBe("default-v1");
  });
});

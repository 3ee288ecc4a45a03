/**
 * S4 §1 checkpoint state and §2 NOTES patch protocol: extraction and
 * stripping, absent keys = no change, actions after the patch, unknown actions
 * ignored and traced, capability requests vs a refused model grant, malformed
 * NOTES never breaking the turn, and persistence across eviction.
 */
import { evictDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { applyPatch, EMPTY_STATE, extractNotes, processAssistantNotes, runActions } from "../../src/sessions/notes";
import { applyNotesIn } from "../support/session";

const notes = (payload: unknown) =>
  `<<<NOTES_JSON>>>${typeof payload === "string" ? payload : JSON.stringify(payload)}<<<END_NOTES_JSON>>>`;

describe("S4 §2 NOTES extraction", () => {
  it("the block is stripped from what users see and its patch returned", () => {
    const r = extractNotes(`Deployed both services.\n\n${notes({ add_decisions: ["ship on Fridays"] })}`);
    expect(r.visible).toBe("Deployed both services.");
    expect(r.patch).toEqual({ add_decisions: ["ship on Fridays"] });
    expect(r.traces).toEqual([{ kind: "notes_patch", data: { applied: ["add_decisions"], ignored_keys: [] } }]);
  });

  it("S4's example payload is accepted", () => {
    const payload = {
      set_goals: ["..."],
      add_open_loops: ["..."],
      close_open_loops: ["..."],
      add_decisions: ["..."],
      add_constraints: ["..."],
      set_episode_summary: "...",
      add_memory_tags: ["..."],
      actions: ["condense_now", "condense_smart", "request_permission:net:huggingface.co"],
    };
    expect(extractNotes(notes(payload)).patch).toEqual(payload);
  });

  const malformed: [string, string, string][] = [
    ["invalid JSON", `Hi ${notes("{not json")}`, "NOTES payload is not valid JSON"],
    ["wrong type", `Hi ${notes({ set_goals: "one goal" })}`, "NOTES payload invalid at set_goals"],
    ["unterminated block", 'Hi <<<NOTES_JSON>>>{"set_goals":["x"]}', "unterminated NOTES block"],
    ["a JSON array", `Hi ${notes([1, 2])}`, "NOTES payload invalid at (root)"],
  ];
  for (const [name, reply, error] of malformed) {
    it(`malformed NOTES (${name}) never break the turn: stripped, traced, no patch`, () => {
      const r = extractNotes(reply);
      expect(r.visible).toBe("Hi");
      expect(r.patch).toBeNull();
      expect(r.traces).toEqual([{ kind: "notes_patch", data: { error } }]);
    });
  }

  it("unknown patch keys are dropped and traced", () => {
    const r = extractNotes(notes({ add_decisions: ["a"], make_me_admin: true }));
    expect(r.patch).toEqual({ add_decisions: ["a"] });
    expect(r.traces).toEqual([{ kind: "notes_patch", data: { applied: ["add_decisions"], ignored_keys: ["make_me_admin"] } }]);
  });

  it("a reply without NOTES is unchanged", () => {
    expect(extractNotes("plain answer")).toEqual({ visible: "plain answer", patch: null, traces: [] });
  });
});

describe("S4 §2 patch application and actions", () => {
  it("absent keys = no change; add_* append without duplicates; close_open_loops removes", () => {
    const start = { ...EMPTY_STATE, goals: ["g1"], open_loops: ["l1", "l2"], decisions: ["d1"], episode_summary: "so far" };
    const next = applyPatch(start, { add_open_loops: ["l3", "l1"], close_open_loops: ["l2"], add_decisions: ["d1", "d2"] });
    expect(next).toEqual({ ...start, open_loops: ["l1", "l3"], decisions: ["d1", "d2"] });
    expect(next.goals).toEqual(["g1"]);
    expect(next.episode_summary).toBe("so far");
    expect(applyPatch(start, {})).toEqual(start);
  });

  it("actions run after the patch: condense requests compaction; unknown actions are ignored and traced", () => {
    const r = processAssistantNotes(EMPTY_STATE, notes({ set_goals: ["ship"], actions: ["condense_smart", "dance", "condense_now"] }));
    expect(r.state.goals).toEqual(["ship"]);
    expect(r.compaction).toBe("now");
    expect(r.traces.slice(1)).toEqual([
      { kind: "actions", data: { action: "condense_smart", outcome: "compaction_requested" } },
      { kind: "actions", data: { action: "dance", outcome: "ignored_unknown" } },
      { kind: "actions", data: { action: "condense_now", outcome: "compaction_requested" } },
    ]);
  });

  it("request_permission:<cap> adds to pending unless granted; a model's grant_permission is refused and traced", () => {
    const granted = { ...EMPTY_STATE, capabilities_granted: ["net:example.com"] };
    const r = runActions(granted, [
      "request_permission:net:huggingface.co",
      "request_permission:net:huggingface.co",
      "request_permission:net:example.com",
      "grant_permission:net",
    ]);
    expect(r.state.capabilities_pending).toEqual(["net:huggingface.co"]);
    expect(r.state.capabilities_granted).toEqual(["net:example.com"]);
    expect(r.traces.map((t) => t.data)).toEqual([
      { action: "request_permission:net:huggingface.co", outcome: "capability_requested" },
      { action: "request_permission:net:huggingface.co", outcome: "already_pending" },
      { action: "request_permission:net:example.com", outcome: "already_granted" },
      { action: "grant_permission:net", outcome: "refused" },
    ]);
  });
});

describe("checkpoint in the SessionDO (S4 §1.2)", () => {
  const identity = { sessionKey: "agent:main:http:notes-room:dm:notes-user", agentId: "main" };
  const stub = () => env.SESSIONS.getByName(identity.sessionKey);

  it("applies NOTES, bumps the revision, keeps a trace tail, and survives eviction", async () => {
    const first = await applyNotesIn(
      stub(),
      identity,
      `Noted. ${notes({ add_open_loops: ["ask about budget"], actions: ["request_permission:net"] })}`,
    );
    expect(first.visible).toBe("Noted.");
    expect(first.checkpoint.revision).toBe(1);
    expect(first.checkpoint.state.open_loops).toEqual(["ask about budget"]);
    expect(first.checkpoint.state.capabilities_pending).toEqual(["net"]);
    expect(first.checkpoint.trace_tail.map((t) => JSON.parse(t).kind)).toEqual(["notes_patch", "actions"]);
    await evictDurableObject(stub());
    const after = await stub().checkpoint(identity);
    expect(after.revision).toBe(1);
    expect(after.state.capabilities_pending).toEqual(["net"]);
    expect(after.updated_ts).toBeGreaterThan(0);
  });

  it("only an admin grant moves a capability from pending to granted", async () => {
    const model = await applyNotesIn(stub(), identity, notes({ actions: ["grant_permission:net"] }));
    expect(model.checkpoint.state.capabilities_granted).toEqual([]);
    const granted = await stub().grantCapability(identity, "net");
    expect(granted.state.capabilities_granted).toEqual(["net"]);
    expect(granted.state.capabilities_pending).toEqual([]);
    const revoked = await stub().revokeCapability(identity, "net");
    expect(revoked.state.capabilities_granted).toEqual([]);
  });

  it("a malformed NOTES block leaves the state as it was and is traced", async () => {
    const before = await stub().checkpoint(identity);
    const r = await applyNotesIn(stub(), identity, `ok ${notes("{broken")}`);
    expect(r.visible).toBe("ok");
    expect(r.checkpoint.state).toEqual(before.state);
    expect(JSON.parse(r.checkpoint.trace_tail.at(-1) as string)).toEqual({
      kind: "notes_patch",
      data: { error: "NOTES payload is not valid JSON" },
    });
  });
});

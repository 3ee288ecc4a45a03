/**
 * S3 §2 run lifecycle events: minimum fields, the required order, seq strictly
 * increasing with no gaps, exactly one terminal event.
 */
import { describe, expect, it } from "vitest";
import { type EventType, nextEvent, RunEvent, validateRunLog } from "../../src/runs/events";

function log(types: EventType[]): RunEvent[] {
  const out: RunEvent[] = [];
  for (const event_type of types) {
    const r = nextEvent(out.at(-1), { event_type, run_id: "run_1", agent_id: "main" });
    if (!r.ok) throw new Error(r.error);
    out.push(r.event);
  }
  return out;
}

describe("S3 §2 lifecycle events", () => {
  it("a run with two tool rounds: legal order, seq 1..n, every minimum field", () => {
    const events = log([
      "run.created",
      "run.started",
      "model.requested",
      "tool.call",
      "tool.result",
      "model.requested",
      "tool.call",
      "tool.call",
      "tool.result",
      "tool.result",
      "model.requested",
      "run.completed",
    ]);
    expect(events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    for (const e of events) {
      expect(RunEvent.safeParse(e).success).toBe(true);
      expect(e.event_id).toMatch(/^evt_[0-9a-f]{32}$/);
    }
    expect(validateRunLog(events)).toBeNull();
  });

  it("approval steps sit between tool.call and tool.result", () => {
    expect(
      validateRunLog(
        log([
          "run.created",
          "run.started",
          "model.requested",
          "tool.call",
          "approval.requested",
          "approval.decided",
          "tool.result",
          "run.completed",
        ]),
      ),
    ).toBeNull();
  });

  const illegal: [EventType[], EventType, string][] = [
    [[], "run.started", "run.started cannot follow nothing"],
    [["run.created"], "model.requested", "model.requested cannot follow run.created"],
    [["run.created", "run.started"], "tool.result", "tool.result cannot follow run.started"],
    [["run.created", "run.started", "run.completed"], "run.failed", "run.failed cannot follow run.completed"],
    [["run.created", "run.started", "run.cancelled"], "model.requested", "model.requested cannot follow run.cancelled"],
  ];
  for (const [before, next, error] of illegal) {
    it(`refuses ${error}`, () => {
      expect(nextEvent(log(before).at(-1), { event_type: next, run_id: "run_1", agent_id: "main" })).toEqual({ ok: false, error });
    });
  }

  it("a run may end from any state with exactly one terminal event (cancel while queued, fail mid-round)", () => {
    expect(validateRunLog(log(["run.created", "run.cancelled"]))).toBeNull();
    expect(validateRunLog(log(["run.created", "run.started", "model.requested", "tool.call", "run.failed"]))).toBeNull();
  });

  it("validateRunLog catches gaps and reordering", () => {
    const events = log(["run.created", "run.started", "model.requested", "run.completed"]);
    expect(validateRunLog([events[0], events[2], events[3]] as RunEvent[])).toBe("seq 3 after 1: seq must increase by exactly 1");
    const swapped = [events[1], events[0]].map((e, i) => ({ ...(e as RunEvent), seq: i + 1 }));
    expect(validateRunLog(swapped)).toBe("run.started cannot follow nothing");
  });
});

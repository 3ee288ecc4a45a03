/**
 * S3 §2 failure-loop handling, at exactly its thresholds: recovery after 2
 * consecutive failures, escalation after 3 more in recovery, recovery cleared
 * only by 2 consecutive successes; the escalation lists recent attempts,
 * errors and output snippets, redacted.
 */
import { describe, expect, it } from "vitest";
import {
  type Attempt,
  escalationMessage,
  type FailureLoopState,
  INITIAL_FAILURE_LOOP,
  recordToolResult,
} from "../../src/runs/failure-loop";

const fail = (error = "ENOENT: no such file"): Attempt => ({ tool: "fs.read_text", ok: false, error });
const ok: Attempt = { tool: "fs.read_text", ok: true, output: "hello" };
const run = (attempts: Attempt[], from: FailureLoopState = INITIAL_FAILURE_LOOP) => attempts.reduce((s, a) => recordToolResult(s, a), from);

describe("S3 §2 failure loop", () => {
  it("one failure stays normal; exactly 2 consecutive failures enter recovery", () => {
    expect(run([fail()]).mode).toBe("normal");
    expect(run([fail(), fail()]).mode).toBe("recovery");
    expect(run([fail(), ok, fail()]).mode).toBe("normal");
  });

  it("in recovery, 2 more failures keep recovering; the 3rd escalates (2 + 3)", () => {
    expect(run([fail(), fail(), fail(), fail()]).mode).toBe("recovery");
    expect(run([fail(), fail(), fail(), fail(), fail()]).mode).toBe("escalated");
  });

  it("a single success does not clear recovery; 2 consecutive successes do", () => {
    const recovering = run([fail(), fail()]);
    expect(run([ok], recovering).mode).toBe("recovery");
    expect(run([ok, fail()], recovering).mode).toBe("recovery");
    expect(run([ok, ok], recovering).mode).toBe("normal");
    expect(run([ok, ok], recovering)).toMatchObject({ consecutiveFailures: 0, failuresInRecovery: 0 });
  });

  it("a transient success inside recovery does not reset the escalation count", () => {
    expect(run([fail(), fail(), fail(), ok, fail(), fail()]).mode).toBe("escalated");
  });

  it("the thresholds are configurable", () => {
    const config = { failuresToRecover: 3, failuresInRecoveryToEscalate: 1, successesToClear: 1, recentAttempts: 5 };
    const s = [fail(), fail(), fail()].reduce((st, a) => recordToolResult(st, a, config), INITIAL_FAILURE_LOOP);
    expect(s.mode).toBe("recovery");
    expect(recordToolResult(s, fail(), config).mode).toBe("escalated");
    expect(recordToolResult(s, ok, config).mode).toBe("normal");
  });

  it("the escalation message lists recent attempts, errors and output snippets, redacted", () => {
    const s = [
      { tool: "http.get", ok: false, error: "401 with key sk-abcdefghijklmnopqrstuvwxyz123456" },
      { tool: "http.get", ok: false, error: "timeout after 30s", output: "partial <html>" },
      { tool: "fs.read_text", ok: true, output: "config loaded" },
      { tool: "http.get", ok: false, error: "403 forbidden" },
      { tool: "http.get", ok: false, error: "403 forbidden" },
      { tool: "http.get", ok: false, error: "403 forbidden" },
    ].reduce((st, a) => recordToolResult(st, a), INITIAL_FAILURE_LOOP);
    expect(s.mode).toBe("escalated");
    const text = escalationMessage(s);
    expect(text.split("\n").slice(2, 8)).toEqual([
      "Recent attempts:",
      "1. http.get: failed — error: timeout after 30s — output: partial <html>",
      "2. fs.read_text: succeeded — output: config loaded",
      "3. http.get: failed — error: 403 forbidden",
      "4. http.get: failed — error: 403 forbidden",
      "5. http.get: failed — error: 403 forbidden",
    ]);
    // Once escalated, further results change nothing.
    expect(recordToolResult(s, ok)).toBe(s);
    const early = run([{ tool: "http.get", ok: false, error: "401 with key sk-abcdefghijklmnopqrstuvwxyz123456" }]);
    expect(early.recent[0]?.error).toBe("401 with key [REDACTED:openai_style_key]");
  });
});

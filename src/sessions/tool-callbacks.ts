/**
 * Gateway tool callbacks from a sandbox (S5 §Gateway Callback Contract, §6.3), executed here once per
 * `(tool, tool_call_id)`: the key is recorded as in flight before the tool runs; a duplicate while it runs gets
 * the same answer; a completed answer is replayed for `retentionMs`; the same key with other arguments is refused
 * (422). All of it is in this object's storage, so it survives eviction and restarts. A key left in flight by an
 * earlier instance (it was interrupted) is answered as interrupted, not re-run. Stored answers are purged when
 * they expire, by the `idempotencyPurge` capability.
 */
import { begin, canonicalJson, complete, nextExpiry, purgeExpired, requestHash } from "../idempotency/store";
import { setupOnlyReason } from "../runs/engine";
import { redactJson, redactText, secretValuesFromEnv } from "../security/redact";
import { s5WireArgs } from "../tools/builtin/s5";
import { decide, type ToolPolicy } from "../tools/policy";
import { invokeTool, type ToolDefinition, type ToolOutcome, tools } from "../tools/registry";
import type { AlarmCapability } from "./capabilities";
import type { SessionContext } from "./context";
import { enqueueSessionAudit } from "./session-audit";
import { callbackRunOf } from "./session-runs-store";
import { currentSession, sessionType } from "./session-state";
import { readSession } from "./session-store";
import { sessionToolHost } from "./tool-host";

/** A gateway tool callback's answer (S5): the body, or an HTTP-level refusal. */
export type ToolCallbackAnswer =
  | { status: 200; body: { success: boolean; result: string; data?: unknown }; replayed: boolean }
  | { status: 404 | 409 | 410 | 422; code: "resource.not_found" | "conflict" | "gone" | "idempotency.mismatch"; message: string };

/** What the Worker resolves from the configuration for a callback (the SessionDO never reads the config). */
export interface ToolCallbackPolicy {
  allow: string[];
  policy: ToolPolicy;
  retentionMs: number;
  timeoutMs: number;
}

type CallbackBody = Extract<ToolCallbackAnswer, { status: 200 }>;

/** A callback answer that is a tool-level failure (`success: false`), never an HTTP error. */
function refusedCallback(result: string): CallbackBody {
  return { status: 200, body: { success: false, result }, replayed: false };
}

/** Runs the tool's handler for a callback, inside the session's running (or newest) run. */
async function invokeHandler(
  cx: SessionContext,
  def: ToolDefinition,
  input: Record<string, unknown>,
  toolCallId: string,
  timeoutMs: number,
) {
  const session = currentSession(cx);
  const running = callbackRunOf(cx.sql, session.sessionId);
  return invokeTool(def, input, {
    env: cx.env,
    agentId: session.agentId,
    runId: running ?? "",
    sessionKey: session.sessionKey,
    channel: "sandbox",
    toolCallId,
    capabilities: [],
    netAllowlist: null,
    timeoutMs,
    session: sessionToolHost(cx, running ?? null),
  });
}

/** Gates and runs one callback; every outcome is an S5 `{success, result, data?}` body (redacted), audited. */
async function runCallback(
  cx: SessionContext,
  def: ToolDefinition,
  input: Record<string, unknown>,
  toolCallId: string,
  p: ToolCallbackPolicy,
): Promise<CallbackBody> {
  const session = currentSession(cx);
  const secrets = secretValuesFromEnv(cx.env);
  const decision = decide({
    calledAs: def.name,
    registry: tools,
    agentId: session.agentId,
    allow: p.allow,
    channel: "sandbox",
    policy: p.policy,
    args: input,
  });
  let outcome: ToolOutcome;
  if (decision.outcome === "denied") outcome = { ok: false, error: { code: decision.code ?? "policy.denied", message: decision.reason } };
  else if (def.setupOnly && sessionType(cx) !== "setup")
    outcome = { ok: false, error: { code: "policy.denied", message: setupOnlyReason(def.name) } };
  else if (decision.outcome === "requires_approval")
    outcome = {
      ok: false,
      error: { code: "policy.denied", message: `${def.name} needs a human approval, which tool callbacks cannot wait for` },
    };
  else outcome = await invokeHandler(cx, def, input, toolCallId, p.timeoutMs);
  const body = outcome.ok
    ? {
        success: true,
        result: redactText(outcome.summary ?? `${def.name} succeeded`, secrets),
        data: redactJson(outcome.output ?? null, secrets).value,
      }
    : { success: false, result: redactText(`${outcome.error.code}: ${outcome.error.message}`, secrets) };
  const audit = {
    tool: def.name,
    tool_call_id: toolCallId,
    success: outcome.ok,
    ...(outcome.ok ? {} : { code: outcome.error.code }),
    gate: decision.outcome,
  };
  cx.storage.transactionSync(() => enqueueSessionAudit(cx, "tool.callback", "sandbox", audit));
  return { status: 200, body, replayed: false };
}

/** The tool callbacks of one session object. */
export class ToolCallbacks {
  readonly #cx: SessionContext;
  /** Called once an answer is stored, so the alarm covers its expiry. */
  readonly #stored: () => Promise<void>;
  /** Tool callbacks executing now, by idempotency key: a duplicate arriving meanwhile waits for the same answer. */
  readonly #running = new Map<string, Promise<CallbackBody>>();

  /** `stored` runs after each answer is stored (the facade reschedules its alarm there). */
  constructor(cx: SessionContext, stored: () => Promise<void>) {
    this.#cx = cx;
    this.#stored = stored;
  }

  /** Answers one callback of generation `sessionId`: at most once per `(tool, toolCallId)`, replayed after. */
  async answer(
    sessionId: string,
    calledAs: string,
    toolCallId: string,
    args: Record<string, unknown>,
    p: ToolCallbackPolicy,
  ): Promise<ToolCallbackAnswer> {
    const cx = this.#cx;
    await cx.refreshSecrets();
    const row = readSession(cx.sql);
    if (!row) return { status: 404, code: "resource.not_found", message: `no session ${sessionId}` };
    if (row.sessionId !== sessionId)
      return { status: 410, code: "gone", message: `session ${sessionId} was archived; mint a sandbox token for the current session` };
    const def = tools.get(calledAs);
    if (!def) return refusedCallback(`tool.not_found: unknown tool "${calledAs}"`);
    const input = s5WireArgs(def.name, args) as Record<string, unknown>;
    const scope = `tool:${def.name}`;
    const hash = await requestHash(canonicalJson(input));
    // From here to the promise being registered nothing is awaited: the check and the claim are one step.
    const first = begin(cx.sql, scope, toolCallId, hash, Date.now());
    if (first.kind === "mismatch")
      return {
        status: 422,
        code: "idempotency.mismatch",
        message: `tool_call_id ${toolCallId} was already used for ${def.name} with different arguments`,
      };
    if (first.kind === "replay") return { ...(JSON.parse(first.response) as CallbackBody), replayed: true };
    if (first.kind === "in_flight") return this.#inFlight(scope, toolCallId, p);
    return this.#execute(scope, toolCallId, runCallback(cx, def, input, toolCallId, p), p);
  }

  /** A key already in flight: the same answer if it runs here now, else "interrupted" (an earlier instance died). */
  async #inFlight(scope: string, toolCallId: string, p: ToolCallbackPolicy): Promise<ToolCallbackAnswer> {
    const running = this.#running.get(`${scope}\n${toolCallId}`);
    if (running) return { ...(await running), replayed: true };
    const interrupted = refusedCallback(
      `internal.error: an earlier attempt of this call (tool_call_id ${toolCallId}) was interrupted before it finished, so its effect is unknown; check before retrying with a new tool_call_id`,
    );
    complete(this.#cx.sql, scope, toolCallId, JSON.stringify(interrupted), Date.now(), p.retentionMs);
    return interrupted;
  }

  /** Registers the running callback (duplicates join it), then stores its answer for replay. */
  async #execute(scope: string, toolCallId: string, work: Promise<CallbackBody>, p: ToolCallbackPolicy): Promise<ToolCallbackAnswer> {
    const key = `${scope}\n${toolCallId}`;
    this.#running.set(key, work);
    try {
      const answer = await work;
      complete(this.#cx.sql, scope, toolCallId, JSON.stringify(answer), Date.now(), p.retentionMs);
      await this.#stored();
      return answer;
    } finally {
      this.#running.delete(key);
    }
  }
}

/** Capability: purges stored callback answers (and other idempotency records) once they expire. */
export function idempotencyPurge(cx: SessionContext): AlarmCapability {
  return {
    name: "idempotency-purge",
    nextAlarmAt: () => nextExpiry(cx.sql),
    onAlarm: async (now) => {
      purgeExpired(cx.sql, now);
    },
  };
}

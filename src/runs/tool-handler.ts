/**
 * A planned call's handler, run: its S3 §1.1 request envelope, the idempotency record that makes a replay of
 * a finished call return its stored outcome instead of running the tool again, and the handler itself under
 * the request's timeout and the run's cancellation.
 */
import { abandon, type Begin, begin, canonicalJson, complete, peek, recordDone, requestHash } from "../idempotency/store";
import { sha256Hex } from "../prompts/hash";
import { clampTimeout, ToolRequest } from "../tools/envelope";
import { invokeTool, type ToolDefinition, type ToolOutcome } from "../tools/registry";
import { type RunContext, safeJson } from "./host";
import type { RunSpec } from "./spec";
import { type RunRow, type ToolExecutionRow, toolRequestId } from "./store";

/** How long a run tool call's outcome stays in the idempotency store when the run spec does not say. */
const DEFAULT_TOOL_RETENTION_MS = 5 * 60_000;

/**
 * The S3 §1.1 request envelope of a call: `timeout_ms` is the 30000 default clamped to `runs.toolTimeoutMs`.
 * Input that is not a JSON object is carried as `{}` here; the gate refuses such calls before they run.
 */
export function requestEnvelope(run: RunRow, spec: RunSpec, call: ToolExecutionRow): ToolRequest {
  const input = safeJson(call.args);
  return ToolRequest.parse({
    request_id: toolRequestId(run.id, call.round, call.tool_call_id),
    run_id: run.id,
    agent_id: spec.agentId,
    tool: call.tool,
    input: input && typeof input === "object" && !Array.isArray(input) ? input : {},
    timeout_ms: clampTimeout(undefined, spec.toolTimeoutMs),
    created_at: new Date().toISOString(),
  });
}

/** What running a handler needs besides the call. */
export interface HandlerRun {
  request: ToolRequest;
  call: ToolExecutionRow;
  def: ToolDefinition;
  signal: AbortSignal;
  spec: RunSpec;
  /** A honeypot send already holds its place under the rate limits. */
  honeypotReserved?: boolean;
}

/** A handler's outcome, and what is left to write in the call's result transaction (a deferred call's record). */
export interface HandlerRan {
  outcome: ToolOutcome;
  record?: () => void;
}

/**
 * The handler, recorded in the session's idempotency store (DESIGN "Idempotency": the store of tool
 * callbacks serves run tool calls too) under `tool:<name>` and `<run>:<round>:<tool_call_id>` — model
 * tool call ids repeat across runs. An outcome stored there (the call finished but the run's own record
 * of it did not survive a crash) is replayed instead of running the tool again.
 *
 * `start` is what must be durable before the handler runs (the call marked `started`): it commits with the
 * in-flight record, in one transaction. With `deferred` (a read-only call, which is run again after a crash
 * anyway) nothing is written before the handler: the record comes back as `record`, for the caller to write in
 * the call's result transaction (D-065: one commit per call fewer).
 */
export async function runHandler(ctx: RunContext, h: HandlerRun, o: { start?: () => void; deferred?: boolean } = {}): Promise<HandlerRan> {
  const { sql, storage } = ctx.host;
  const scope = `tool:${h.def.name}`;
  const key = `${h.request.run_id}:${h.call.round}:${h.call.tool_call_id}`;
  const hash = await requestHash(canonicalJson(h.request.input));
  const retention = h.spec.idempotencyRetentionMs ?? DEFAULT_TOOL_RETENTION_MS;
  if (o.deferred) {
    const found = peek(sql, scope, key, hash, Date.now());
    if (found?.kind === "replay") return { outcome: JSON.parse(found.response) as ToolOutcome };
    const outcome = await invokeHandler(ctx, h);
    // Replaces an in-flight record an interrupted attempt may have left.
    const record = () => recordDone(sql, scope, key, hash, JSON.stringify(outcome), Date.now(), retention);
    return { outcome, record };
  }
  let stored: Begin = { kind: "new" };
  storage.transactionSync(() => {
    o.start?.();
    stored = begin(sql, scope, key, hash, Date.now());
    if (stored.kind === "in_flight") {
      // Left by an interrupted attempt that the engine has decided to run again (read_only): start afresh.
      abandon(sql, scope, key);
      stored = begin(sql, scope, key, hash, Date.now());
    }
  });
  const first = stored as Begin;
  if (first.kind === "replay") return { outcome: JSON.parse(first.response) as ToolOutcome };
  const outcome = await invokeHandler(ctx, h);
  complete(sql, scope, key, JSON.stringify(outcome), Date.now(), retention);
  return { outcome };
}

/** The handler under the request's timeout and the run's cancellation; a throw becomes internal.error. */
async function invokeHandler(ctx: RunContext, h: HandlerRun): Promise<ToolOutcome> {
  const { host } = ctx;
  const { request, call, def, spec } = h;
  const { input, timeout_ms: timeoutMs, run_id: runId } = request;
  const session = host.session();
  let rendered: string | undefined;
  const outcome = await invokeTool(
    def,
    input,
    {
      env: host.env,
      agentId: request.agent_id,
      runId,
      channel: host.channel(),
      capabilities: host.capabilities(),
      honeypot: spec.honeypot ?? undefined,
      honeypotReserved: h.honeypotReserved ?? false,
      // Runs accepted before this setting existed carry no allowlist field: treat as none.
      netAllowlist: spec.netAllowlist ?? null,
      sessionKey: session.sessionKey,
      toolCallId: call.tool_call_id,
      timeoutMs,
      session: host.toolHost?.(runId),
      channelApis: spec.channelApis,
      secretOrigins: spec.secretOrigins,
      rendered: (text) => {
        rendered = text;
      },
    },
    {
      outer: h.signal,
      onError: (err) =>
        host.logger.log("error", "run.internal_error", {
          run_id: runId,
          tool: def.name,
          error_name: err instanceof Error ? err.name : "unknown",
        }),
    },
  );
  // Kept in the stored outcome, so a replayed call reports the same hash.
  return rendered === undefined ? outcome : { ...outcome, rendered_sha256: await sha256Hex(rendered) };
}

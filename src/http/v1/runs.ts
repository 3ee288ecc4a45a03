/**
 * Runs over HTTP for API callers (S3 §5, DESIGN §3):
 *   POST /v1/runs                      {agent_id, message} → 202 {id, status:"queued"}, in an isolated `run` session
 *   GET  /v1/runs/{run_id}             S3's run shape
 *   POST /v1/runs/{run_id}/cancel      ends a queued or running run with `run.cancelled`
 *   GET  /v1/runs/{run_id}/events      lifecycle events as Server-Sent Events, from any seq
 * A run id names the SessionDO that holds it (src/http/run-by-id.ts), so none of these scan anything.
 * API callers see only their own runs; another caller's run is "not found". The admin's view of runs is
 * src/http/admin/runs.ts.
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import { GatewayError } from "../../errors";
import { apiCallerKey } from "../../runs/caller";
import { eventForApiCaller } from "../../runs/events";
import { RunNotifyRequest, runNotifySpec } from "../../runs/notify-request";
import { type ReleaseReader, type ReleaseStreamOptions, releaseReader } from "../../runs/release-stream";
import { type ReleasedSlice, streamTail } from "../../runs/stream-release";
import { submitTurn } from "../../runs/submit";
import { AGENT_ID } from "../../sessions/keys";
import type { AwaitedRun } from "../../sessions/run-queries";
import type { SessionDO } from "../../sessions/SessionDO";
import { KeyStreamEnded, keyStreamGuard, keyTurnFields, mayUseAgent, requireAgent } from "../middleware/api-keys";
import { requireScope } from "../middleware/auth";
import { bodyField, IDEMPOTENCY_DESCRIPTION, IdempotencyKeyHeader, idempotencyErrors, idempotencyKey } from "../middleware/idempotency-key";
import { requireJsonBody } from "../middleware/json-body";
import { openStreamLease, releaseInBackground } from "../middleware/open-streams";
import { type AppEnv, createRouter, ErrorEnvelopeSchema as ErrorEnvelope } from "../router";
import { runNotFound, runStub } from "../run-by-id";
import { RunIdParam, RunSchema, runErrors } from "../run-schemas";
import { providerReady, sessionKeyOrThrow, submitContext } from "../turns";

export const RunRequest = z
  .strictObject({
    agent_id: z.string().regex(AGENT_ID, "lower-case letters, digits, _ and - (at most 64)"),
    message: z.string().min(1).max(100_000),
    /** S5 session type of the run's new session: `setup` gets the setup task and the setup-only tools. */
    session_type: z.enum(["ordinary", "setup"]).optional(),
    /** Issue 24 §5: a completion webhook for the run (src/runs/notify-request.ts). */
    notify: RunNotifyRequest.optional(),
  })
  .openapi("RunRequest");

const Queued = z.object({ id: z.string(), status: z.literal("queued") }).openapi("RunQueued");

const postRun = createRoute({
  method: "post",
  path: "/runs",
  summary: "Queue a run of an agent in a fresh, isolated session",
  middleware: [requireScope("api"), requireJsonBody, idempotencyKey(runReplayGuard)] as const,
  description:
    "Answers 202 at once. With `Prefer: wait=<seconds>` (at most 60) it answers 200 with the finished run if it ends in that time " +
    "(header `Preference-Applied`), and 202 otherwise. With `notify: {url}` the run view is also POSTed to that https URL, " +
    "signed with Standard Webhooks, when the run ends or waits for an approval (docs/api.md, Completion webhooks). " +
    IDEMPOTENCY_DESCRIPTION,
  request: {
    body: { required: true, content: { "application/json": { schema: RunRequest } } },
    headers: z.object({ prefer: z.string().optional(), "idempotency-key": IdempotencyKeyHeader }),
  },
  responses: {
    200: { description: "The run finished within the Prefer: wait time", content: { "application/json": { schema: RunSchema } } },
    202: { description: "Run queued", content: { "application/json": { schema: Queued } } },
    400: { description: "Invalid request", content: { "application/json": { schema: ErrorEnvelope } } },
    403: {
      description: 'session_type "setup" from a caller not listed in setup.allowedCallers, or a key that may not use this agent',
      content: { "application/json": { schema: ErrorEnvelope } },
    },
    429: {
      description: "The key's requests per minute or tokens per day are spent (`Retry-After`), or too many approvals are pending",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
    ...idempotencyErrors,
    ...runErrors,
  },
});

/** Issue 25 §1: any /v1 request of an API key record counts toward its `limits.requestsPerMinute`. */
const keyRateLimited = {
  429: {
    description: "The API key's requests per minute are spent (`Retry-After`)",
    content: { "application/json": { schema: ErrorEnvelope } },
  },
} as const;

const getRunRoute = createRoute({
  method: "get",
  path: "/runs/{run_id}",
  summary: "A run: status, output, tool executions",
  middleware: [requireScope("api")] as const,
  request: { params: RunIdParam },
  responses: { 200: { description: "The run", content: { "application/json": { schema: RunSchema } } }, ...runErrors, ...keyRateLimited },
});

const cancelRoute = createRoute({
  method: "post",
  path: "/runs/{run_id}/cancel",
  summary: "Cancel a queued or running run",
  middleware: [requireScope("api")] as const,
  request: { params: RunIdParam },
  responses: {
    202: {
      description: "Cancelled (queued run) or cancellation under way (running run)",
      content: { "application/json": { schema: z.object({ id: z.string(), status: z.enum(["cancelled", "running"]) }) } },
    },
    409: { description: "The run has already ended", content: { "application/json": { schema: ErrorEnvelope } } },
    ...runErrors,
    ...keyRateLimited,
  },
});

const eventsRoute = createRoute({
  method: "get",
  path: "/runs/{run_id}/events",
  summary: "The run's lifecycle events as Server-Sent Events",
  description:
    "Each event is one SSE message: `id` = seq, `event` = event_type, `data` = the event JSON. Starts after `Last-Event-ID` " +
    "(or `?after=`), so a client resumes where it stopped; follows the run until its terminal event unless `follow=false`. " +
    "Counts toward the caller's open event streams (`limits.maxOpenStreamsPerCaller`): past it, 429 `rate.limited`. " +
    "With `deltas=true` the stream also carries `run.delta` messages (no `id`; data `{run_id, offset, text}`): the answer's " +
    "text as the output guard releases it, a bounded number of words behind the model, then its last words before the " +
    "terminal event; ephemeral (never stored: the run's output is the one final answer). A stream the guard stops ends its " +
    "deltas with the refusal. A stream opened with an API key record ends with an `error` message (the S3 envelope, " +
    "`auth.unauthorized`) once the key is revoked, rotated or expired: nothing more is sent to it.",
  middleware: [requireScope("api")] as const,
  request: {
    params: RunIdParam,
    query: z.object({
      after: z.coerce.number().int().min(0).optional(),
      follow: z.enum(["true", "false"]).default("true"),
      /** Issue 23: also the answer's text as the output guard releases it (`run.delta`, ephemeral, no `id`). */
      deltas: z.enum(["true", "false"]).default("false"),
    }),
  },
  responses: {
    200: { description: "An event stream", content: { "text/event-stream": { schema: z.string() } } },
    ...runErrors,
    429: {
      description:
        "The caller already has `limits.maxOpenStreamsPerCaller` event streams open, or its API key's requests per minute are spent",
      content: { "application/json": { schema: ErrorEnvelope } },
    },
  },
});

/** How long one long poll for the next event lasts, and how long one stream stays open (clients resume with Last-Event-ID). */
const EVENT_WAIT_MS = 25_000;
const EVENT_STREAM_MAX_MS = 5 * 60_000;

/** `Prefer: wait=<seconds>` (RFC 7240): how long POST /v1/runs may hold the response for the run to finish. */
function preferWait(header: string | undefined): number | null {
  const match = /(?:^|[,;\s])wait=(\d{1,3})(?:$|[,;\s])/.exec(header ?? "");
  return match ? Math.min(60, Number(match[1])) : null;
}

/** RPC results whose payloads are JSON objects lose their types over the stub; these name them again. */
type EventsPage = Awaited<ReturnType<SessionDO["runEvents"]>>;

/**
 * The `run.delta` side of an events stream (issue 23): reads the text the output guard released from one
 * `releaseStream` RPC (D-060), writes it with its offset (a reconnecting client drops what it has), and before
 * `run.completed` the answer's held last words.
 */
class DeltaWriter {
  #released = "";
  #blocked = false;
  #ended = false;
  #last: ReleasedSlice<AwaitedRun> | null = null;
  #frames: ReleaseReader<AwaitedRun>;
  readonly #until: number;
  readonly #quietMs: number;
  readonly stub: DurableObjectStub<SessionDO>;
  readonly runId: string;
  readonly write: (m: { event: string; data: string }) => Promise<void>;

  constructor(stub: DurableObjectStub<SessionDO>, runId: string, o: ReleaseStreamOptions, write: DeltaWriter["write"]) {
    this.stub = stub;
    this.runId = runId;
    this.write = write;
    this.#until = Date.now() + o.untilMs;
    this.#quietMs = o.quietMs;
    this.#frames = this.#open();
  }

  /** Writes the next frame's text (at most `quietMs` away); true once the run has ended or paused (or the deltas ended). */
  async poll(): Promise<boolean> {
    if (this.#ended) return true;
    // A stream that ended at an approval pause is opened again from where it stopped: the run may go on.
    if (this.#last?.end && this.#last.run?.paused && !this.#last.blocked && Date.now() < this.#until) {
      this.#frames = this.#open();
      this.#last = null;
    }
    if (this.#last?.end) return true;
    const slice = await this.#read();
    if (slice.blocked && !this.#blocked) {
      this.#blocked = true;
      this.#ended = true;
      await this.#send(streamTail(this.#released, slice.roundStart, true, ""));
    }
    return this.#ended || slice.end === true;
  }

  /** Before `run.completed`: the rest of the stream, then the rest of the answer (or the refusal), from the final output. */
  async finish(): Promise<void> {
    if (this.#ended) return;
    let last = this.#last?.end ? this.#last : await this.#read();
    while (!last.end) last = await this.#read(); // the run has ended: its last frame follows at once
    // A stream that ended before the run did (follow=false, its time up) leaves one more read, as before D-060.
    if (!last.run?.finished) last = (await this.stub.releasedText(this.runId, this.#released.length, 0)) as ReleasedSlice<AwaitedRun>;
    if (!last.end) await this.#send(last.text);
    this.#ended = true;
    await this.#send(streamTail(this.#released, last.roundStart, last.blocked, last.run?.view.output ?? ""));
  }

  /** Cancels the release stream if it is still open (the client went away, the events stream ended). */
  close(): Promise<void> {
    return this.#frames.close();
  }

  /** A release stream from what this writer has sent on (opened by the reader's first read). */
  #open(): ReleaseReader<AwaitedRun> {
    const o = { quietMs: this.#quietMs, untilMs: Math.max(0, this.#until - Date.now()), after: this.#released.length };
    return releaseReader<AwaitedRun>(() => this.stub.releaseStream(this.runId, o), null);
  }

  async #read(): Promise<ReleasedSlice<AwaitedRun>> {
    const slice = await this.#frames.next();
    this.#last = slice;
    await this.#send(slice.text);
    return slice;
  }

  async #send(text: string): Promise<void> {
    if (text === "") return;
    const offset = this.#released.length;
    this.#released += text;
    await this.write({ event: "run.delta", data: JSON.stringify({ run_id: this.runId, offset, text }) });
  }
}

/** One SSE message of an events stream. */
type SseMessage = { id?: string; event: string; data: string };

/**
 * The events of a run after `after`, written through `send` (with the released text first when `text` is given) until
 * the run has ended and its events are out — with `follow`, long-polling for each next one while `live` holds, for at
 * most EVENT_STREAM_MAX_MS (clients resume with Last-Event-ID).
 */
async function followEvents(o: {
  stub: DurableObjectStub<SessionDO>;
  runId: string;
  after: number;
  follow: boolean;
  text: DeltaWriter | null;
  send: (m: SseMessage) => Promise<void>;
  live: () => Promise<boolean>;
  /** The longest one long poll for events may last (EVENT_WAIT_MS, less for a key's stream: D-086). */
  waitMs: number;
}): Promise<void> {
  const deadline = Date.now() + EVENT_STREAM_MAX_MS;
  let after = o.after;
  while (await o.live()) {
    // With deltas, the wait is on released text (which also wakes at every event); then the events, at once.
    const settled = o.text ? await o.text.poll() : true;
    // Long poll: the object answers at once when events are there, else when the next one is written.
    const wait = o.follow && settled ? Math.max(0, Math.min(o.waitMs, deadline - Date.now())) : 0;
    const page = (await o.stub.runEvents(o.runId, after, 500, wait)) as unknown as EventsPage;
    if (!page) break;
    for (const e of page.events) {
      if (e.event_type === "run.completed") await o.text?.finish();
      // Filtered on the way out, not in storage: admins, audit and bundles keep the prompt hashes.
      await o.send({ id: String(e.seq), event: e.event_type, data: JSON.stringify(eventForApiCaller(e)) });
      after = e.seq;
    }
    if (page.events.length === 500) continue;
    if ((page.finished && page.events.length === 0) || !o.follow || Date.now() >= deadline) break;
    if (page.finished) continue; // drain what the terminal step wrote, then stop
  }
}

/** API callers reach only the runs they queued; admins reach every run. */
function callerOf(c: Context<AppEnv>): string | null {
  const principal = c.get("principal");
  return principal?.scope === "api" ? principal.callerId : null;
}

/**
 * A setup session's tools save what the agent's services will run (S5 §6.2), so only callers the operator
 * listed in `setup.allowedCallers` may start one (issue 20 §6).
 */
/**
 * Whether the request's caller may see run of `callerId` on `agentId`: its own, and (issue 25 §1) of an agent its key
 * may use — a key restricted to some agents does not read, follow or cancel the runs its caller made on others.
 */
function ownRun(c: Context<AppEnv>, callerId: string | null, agentId: string): boolean {
  return callerId === callerOf(c) && mayUseAgent(c.get("principal"), agentId);
}

function refuseSetupUnlessAllowed(allowed: readonly string[], callerId: string): void {
  if (!allowed.includes(callerId))
    throw new GatewayError(
      "auth.forbidden",
      `caller "${callerId}" may not start a setup session: only callers listed in the config's setup.allowedCallers may`,
    );
}

/** The 403s of a run request for a configured agent, in the route's order (issue 25 §1: a key names its agents). */
function authorizeRun(c: Context<AppEnv>, agentId: string, sessionType: unknown): void {
  requireAgent(c.get("principal"), agentId);
  if (sessionType === "setup") refuseSetupUnlessAllowed(c.get("config").setup.allowedCallers, callerOf(c) as string);
}

/** Issue 33 (D-087): the same 403s before an Idempotency-Key replay; an unknown agent is the route's 404. */
function runReplayGuard(c: Context<AppEnv>, body: unknown): void {
  const agentId = bodyField(body, "agent_id");
  if (typeof agentId === "string" && Object.hasOwn(c.get("config").agents, agentId))
    authorizeRun(c, agentId, bodyField(body, "session_type"));
}

/** The run routes. */
export function runRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();

  app.openapi(postRun, async (c) => {
    const body = c.req.valid("json");
    const config = c.get("config");
    if (!Object.hasOwn(config.agents, body.agent_id)) throw new GatewayError("resource.not_found", `unknown agent "${body.agent_id}"`);
    const callerId = callerOf(c) as string;
    authorizeRun(c, body.agent_id, body.session_type);
    const notify = body.notify ? await runNotifySpec(body.notify, c.env, config) : null; // refused before anything is queued
    // An isolated session per run (DESIGN "Session keys": scope `run`), owned by the caller. Under an
    // Idempotency-Key the nonce is the key's attempt token, so a re-attempt reaches the same session (and run).
    const idempotency = c.get("idempotency");
    const nonce = idempotency?.attempt ?? crypto.randomUUID().replaceAll("-", "");
    const wait = preferWait(c.req.header("Prefer"));
    await providerReady(c);
    const { queued, done } = await submitTurn(submitContext(c), {
      agentId: body.agent_id,
      session: async () => sessionKeyOrThrow(`agent:${body.agent_id}:http:${callerId}:run:${nonce}`),
      sessionType: body.session_type ?? "ordinary",
      message: body.message,
      source: "http",
      channel: "http",
      callerId,
      refuseWhenBacklogged: { callerKey: apiCallerKey(callerId) },
      ...keyTurnFields(c.get("principal")),
      ...(idempotency ? { dispatchKey: idempotency.dispatchKey } : {}),
      ...(notify ? { notify } : {}),
      // The caller would rather wait: answer with the finished run if it ends in time (200), else as usual (202).
      ...(wait !== null ? { wait: { ms: wait * 1000 } } : {}),
    });
    if (done?.runLines) c.set("runLines", done.runLines); // D-068: printed in this request's line
    if (wait !== null && done?.finished) {
      c.header("Preference-Applied", `wait=${wait}`);
      return c.json(done.view as z.infer<typeof RunSchema>, 200);
    }
    return c.json({ id: queued.runId, status: "queued" as const }, 202);
  });

  app.openapi(getRunRoute, async (c) => {
    const { run_id } = c.req.valid("param");
    const record = await runStub(c, run_id).runRecord(run_id);
    if (!record || !ownRun(c, record.callerId, record.view.agent_id)) throw runNotFound(run_id);
    return c.json(record.view as z.infer<typeof RunSchema>, 200);
  });

  app.openapi(cancelRoute, async (c) => {
    const { run_id } = c.req.valid("param");
    const stub = runStub(c, run_id);
    const record = await stub.runRecord(run_id);
    if (!record || !ownRun(c, record.callerId, record.view.agent_id)) throw runNotFound(run_id);
    const result = await stub.cancelRun(run_id);
    if (!result.ok && result.reason === "not_found") throw runNotFound(run_id);
    if (!result.ok) throw new GatewayError("conflict", `run ${run_id} has already ended (${result.status})`);
    return c.json({ id: run_id, status: result.status as "cancelled" | "running" }, 202);
  });

  app.openapi(eventsRoute, async (c) => {
    const { run_id } = c.req.valid("param");
    const q = c.req.valid("query");
    const stub = runStub(c, run_id);
    const first = (await stub.runEvents(run_id, 0, 1)) as unknown as EventsPage;
    if (!first || !ownRun(c, first.callerId, first.agentId)) throw runNotFound(run_id);
    const lastEventId = Number.parseInt(c.req.header("Last-Event-ID") ?? "", 10);
    const after = Number.isSafeInteger(lastEventId) && lastEventId >= 0 ? lastEventId : (q.after ?? 0);
    const follow = q.follow === "true";
    const lease = await openStreamLease(c); // 429 when the caller has its limit of streams open (issue 20 §4)
    // Issue 33 (D-086): every piece waits on the key's check, so a key revoked, rotated or expired meanwhile gets nothing more.
    const guard = keyStreamGuard(c.get("principal"), c.env.DB, first.agentId);
    return streamSSE(c, async (stream) => {
      let closed = false;
      stream.onAbort(() => {
        closed = true;
        releaseInBackground(c, lease);
      });
      const send = async (m: SseMessage) => {
        await guard.check();
        await stream.writeSSE(m);
      };
      // A key's stream wakes at least every idleMs even while idle, so the key is checked that often (D-086).
      const waitMs = Math.min(EVENT_WAIT_MS, guard.idleMs);
      // With deltas, released text comes from one RPC's stream (D-060): a frame at least every waitMs.
      const frames = { quietMs: waitMs, untilMs: follow ? EVENT_STREAM_MAX_MS : 0 };
      const text = q.deltas === "true" ? new DeltaWriter(stub, run_id, frames, send) : null;
      const live = async () => {
        if (closed || !(await lease.renew())) return false;
        await guard.check(); // an idle stream is checked once per long poll too
        return true;
      };
      try {
        await followEvents({ stub, runId: run_id, after, follow, text, send, live, waitMs });
      } catch (err) {
        if (!(err instanceof KeyStreamEnded)) throw err;
        // The S3 envelope in an `error` message, then the end: reconnecting with the key is refused (401 or 403).
        if (!closed) await stream.writeSSE({ event: "error", data: JSON.stringify(err.error.toEnvelope()) });
      } finally {
        await text?.close();
        await lease.release();
      }
    }) as never;
  });

  return app;
}

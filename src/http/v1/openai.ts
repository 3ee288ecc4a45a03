/**
 * The OpenAI-compatible front door (issue 13, docs/openai.md): `POST /v1/chat/completions` and `GET /v1/models`
 * for any OpenAI client — the official SDKs, chat UIs, editor plugins — with every contract rule still in force
 * behind it. A request is one turn of the same engine `POST /v1/chat/messages` drives: prompt stack, tool policy,
 * approvals, budgets, audit. `model` names an agent (`agent:<id>` or an alias); `user` names the conversation
 * (session `agent:<id>:openai:<caller>:dm:<user>`), and without it each request is an isolated run.
 *
 * Answers are OpenAI's shapes: `chat.completion`, or with `stream: true` `chat.completion.chunk` events ending in
 * `data: [DONE]`. Streamed, the content arrives as the incremental output guard releases it (issue 23, D-054:
 * checked over a sliding window, a bounded number of words behind the model; src/runs/stream-release.ts), and
 * its last words from the final answer once the run has committed it; a window that trips the guard ends the
 * stream with the refusal. External channels stay final-only (S1 §2.4).
 * A run that stops for a human approval, or outlasts `openai.waitSeconds`, is answered at once with its run id.
 * Errors on these paths are OpenAI's `{"error":{"message","type","code"}}` (the app's error funnel, src/http/app.ts).
 */
import { createRoute, type OpenAPIHono, z } from "@hono/zod-openapi";
import type { Context } from "hono";
import { streamSSE } from "hono/streaming";
import { ERROR_CODES, type ErrorCode, GatewayError } from "../../errors";
import { agentForModel, ChatCompletionRequest, ChatMessage, type ChatTurn, modelNames, readChatRequest } from "../../openai/request";
import { ChatCompletion, chatCompletion, chunks, ModelList, modelList, OpenAIErrorSchema, openAiError, usageOf } from "../../openai/wire";
import { apiCallerKey } from "../../runs/caller";
import { releaseReader } from "../../runs/release-stream";
import { followRelease, streamTail } from "../../runs/stream-release";
import { runEnded, secondsToUtcMidnight, submitTurn } from "../../runs/submit";
import type { SessionDO } from "../../sessions/SessionDO";
import { KeyStreamEnded, keyStreamGuard, keyTurnFields, mayUseAgent, requireAgent } from "../middleware/api-keys";
import { requireScope } from "../middleware/auth";
import {
  bodyField,
  IDEMPOTENCY_DESCRIPTION,
  IdempotencyKeyHeader,
  idempotencyErrorsIn,
  idempotencyKey,
} from "../middleware/idempotency-key";
import { requireJsonBody } from "../middleware/json-body";
import { openStreamLease, releaseInBackground } from "../middleware/open-streams";
import { type AppEnv, createRouter } from "../router";
import { providerReady, sessionKeyOrThrow, submitContext } from "../turns";

/** How often a streamed answer that is still being worked on sends an SSE comment (keeps proxies from timing out). */
export const HEARTBEAT_MS = 15_000;

const openAiErrors = {
  400: { description: "Invalid request", content: { "application/json": { schema: OpenAIErrorSchema } } },
  401: { description: "Missing or invalid token", content: { "application/json": { schema: OpenAIErrorSchema } } },
  403: {
    description: "Not an API token, or a key that may not use this agent",
    content: { "application/json": { schema: OpenAIErrorSchema } },
  },
  404: { description: "No such model (agent)", content: { "application/json": { schema: OpenAIErrorSchema } } },
  429: {
    description:
      "Too many approvals pending, the agent's (or the key's) token budget is spent, the key's requests per minute are spent " +
      "(`Retry-After`), or (`stream: true`) the caller has its limit of open event streams",
    content: { "application/json": { schema: OpenAIErrorSchema } },
  },
  502: { description: "The model provider failed", content: { "application/json": { schema: OpenAIErrorSchema } } },
} as const;

/** Issue 33 (D-087): the agent check of `queueTurn` before an Idempotency-Key replay; an unknown model is the route's 404. */
function completionReplayGuard(c: Context<AppEnv>, body: unknown): void {
  const model = bodyField(body, "model");
  const agentId = typeof model === "string" ? agentForModel(c.get("config"), model) : null;
  if (agentId !== null) requireAgent(c.get("principal"), agentId);
}

const postCompletion = createRoute({
  method: "post",
  path: "/chat/completions",
  summary: "OpenAI-compatible chat: one turn of an agent (model: agent:<agent_id> or an alias)",
  description:
    "OpenAI's Chat Completions request and answer shapes. Only the last user message is new input (the gateway's transcript " +
    "is authoritative); `user` names the conversation, without it each request is an isolated run. Client tools are refused; " +
    "system messages become labelled user content or are refused (`openai.systemMessages`). With `stream: true` the answer " +
    "comes as `chat.completion.chunk` events ending in `data: [DONE]`. A run waiting for an approval, or still running after " +
    "`openai.waitSeconds`, is answered at once with its run id (`GET /v1/runs/{run_id}`). Errors are OpenAI's shape. " +
    "Without `stream`, " +
    IDEMPOTENCY_DESCRIPTION,
  middleware: [requireScope("api"), requireJsonBody, idempotencyKey(completionReplayGuard)] as const,
  request: {
    body: { required: true, content: { "application/json": { schema: ChatCompletionRequest } } },
    headers: z.object({ "idempotency-key": IdempotencyKeyHeader }),
  },
  responses: {
    200: {
      description: "The answer (`chat.completion`), or with `stream: true` Server-Sent Events of `chat.completion.chunk`",
      content: { "application/json": { schema: ChatCompletion }, "text/event-stream": { schema: z.string() } },
    },
    ...openAiErrors,
    ...idempotencyErrorsIn(OpenAIErrorSchema),
  },
});

const getModels = createRoute({
  method: "get",
  path: "/models",
  summary: "OpenAI-compatible model list: the agents a caller may use",
  middleware: [requireScope("api")] as const,
  responses: {
    200: {
      description: "`agent:<agent_id>` for every agent the token may use, then the configured aliases of those agents",
      content: { "application/json": { schema: ModelList } },
    },
    401: openAiErrors[401],
    403: openAiErrors[403],
    429: {
      description: "The API key's requests per minute are spent (`Retry-After`)",
      content: { "application/json": { schema: OpenAIErrorSchema } },
    },
  },
});

type Done = NonNullable<Awaited<ReturnType<SessionDO["awaitRun"]>>>;
const NO_USAGE: Done["usage"] = { prompt_tokens: 0, completion_tokens: 0 };

/** The outcome of a turn as the client sees it: an answer (content), or an error. */
type Outcome = { content: string; usage: Done["usage"] } | { error: GatewayError };

/** What a finished, paused or still-running run answers. */
function outcomeOf(done: Done | null, runId: string, waitSeconds: number): Outcome {
  if (!done) return { error: new GatewayError("internal.error", `run ${runId} was not found after it was queued`) };
  const usage = done.usage;
  if (done.finished) {
    if (done.view.status === "completed") return { content: done.view.output, usage };
    if (done.view.status === "cancelled") return { error: new GatewayError("gone", `run ${runId} was cancelled before it finished`) };
    // The run's own failure code (the same as in its run.failed event), with that code's status.
    const code = done.error?.code;
    const known: ErrorCode = code !== undefined && Object.hasOwn(ERROR_CODES, code) ? (code as ErrorCode) : "internal.error";
    // A spent daily token budget comes back at UTC midnight: say when (issue 25 §1). Not a history too long for the
    // context window, which is over_budget too and no wait mends.
    const daily = known === "over_budget" && /tokens for \d{4}-\d{2}-\d{2} \(UTC\)/.test(done.error?.message ?? "");
    const retry = daily ? { retryAfterSeconds: secondsToUtcMidnight(new Date()) } : {};
    return { error: new GatewayError(known, `run ${runId} failed: ${done.error?.message ?? done.view.output}`, retry) };
  }
  if (done.paused) {
    const waiting = done.pendingApprovals.map((a) => `${a.tool} (approval ${a.approval_id})`).join(", ") || "a tool call";
    return {
      content:
        `This needs an operator's approval before it can go on: ${waiting}. Run ${runId} continues once it is decided; ` +
        `its result will be at GET /v1/runs/${runId}.`,
      usage,
    };
  }
  return {
    content: `Still working on it: run ${runId} has not finished after ${waitSeconds} s. Its result will be at GET /v1/runs/${runId}.`,
    usage,
  };
}

/** Queues the turn in its session (the conversation's, or a fresh isolated one) and returns the object and run. */
async function queueTurn(c: Context<AppEnv>, turn: ChatTurn, firstWaitMs: number) {
  const principal = c.get("principal");
  const callerId = principal?.scope === "api" ? principal.callerId : "admin";
  requireAgent(principal, turn.agentId); // issue 25 §1: a key record names the agents it may use
  // Under an Idempotency-Key, a re-attempt reaches the same session (the nonce is the key's attempt token) and the
  // same run (its dispatch key), so the turn is not taken twice.
  const idempotency = c.get("idempotency");
  const nonce = idempotency?.attempt ?? crypto.randomUUID().replaceAll("-", "");
  const peer = turn.user === null ? `run:${nonce}` : `dm:${turn.user}`;
  await providerReady(c);
  const { session, queued, done, admission } = await submitTurn(submitContext(c), {
    agentId: turn.agentId,
    session: async () => sessionKeyOrThrow(`agent:${turn.agentId}:openai:${callerId}:${peer}`),
    message: turn.input,
    source: "openai",
    channel: "openai",
    callerId,
    refuseWhenBacklogged: { callerKey: apiCallerKey(callerId) },
    ...keyTurnFields(principal),
    ...(idempotency ? { dispatchKey: idempotency.dispatchKey } : {}),
    wait: { ms: firstWaitMs, untilPaused: true },
  });
  if (done?.runLines) c.set("runLines", done.runLines); // D-068: printed in this request's line
  return { session, runId: queued.runId, done: done ?? null, admission };
}

/**
 * Waits for the run in slices (each call to the object waits at most 60 s), until it ends, pauses or `deadline`,
 * or `onSlice` answers false (a stream that lost its open-stream slot stops waiting).
 */
async function awaitOutcome(
  session: DurableObjectStub<SessionDO>,
  runId: string,
  done: Done | null,
  deadline: number,
  sliceMs: number,
  onSlice?: () => Promise<boolean | undefined>,
): Promise<Done | null> {
  let current = done;
  while (current && !current.finished && !current.paused && Date.now() < deadline) {
    if ((await onSlice?.()) === false) break;
    current = (await session.awaitRun(runId, Math.min(sliceMs, deadline - Date.now()), { untilPaused: true })) as Done | null;
  }
  return current;
}

/** The OpenAI-compatible routes (api scope). */
export function openAiRoutes(): OpenAPIHono<AppEnv> {
  const app = createRouter();
  // Requests reference it for each message (only this turn's are validated with it: src/openai/request.ts).
  app.openAPIRegistry.register("OpenAIChatMessage", ChatMessage);

  app.openapi(getModels, (c) => {
    const names = modelNames(c.get("config")).filter((m) => mayUseAgent(c.get("principal"), m.agentId));
    return c.json(modelList(names.map((m) => m.id)), 200);
  });

  app.openapi(postCompletion, async (c) => {
    const config = c.get("config");
    const turn = readChatRequest(c.req.valid("json"), config);
    const waitSeconds = config.openai.waitSeconds;
    const deadline = Date.now() + waitSeconds * 1000;
    const created = Math.floor(Date.now() / 1000);

    if (!turn.stream) {
      const queued = await queueTurn(c, turn, Math.min(60_000, waitSeconds * 1000));
      const { session, runId, done } = queued;
      const final = await awaitOutcome(session, runId, done as Done | null, deadline, 60_000);
      runEnded(queued, final); // its backlog slot, if it ended without an approval pending (D-069)
      const outcome = outcomeOf(final, runId, waitSeconds);
      c.header("X-Run-Id", runId);
      if ("error" in outcome) throw outcome.error;
      return c.json(chatCompletion({ runId, model: turn.model, created, content: outcome.content, usage: usageOf(outcome.usage) }), 200);
    }

    // Streamed: queued (and refused, if it must be) before the stream opens, so errors before it are plain JSON.
    // It takes one of the caller's open-stream slots first (429 at the cap, issue 20 §4), so a refused stream queues nothing.
    const lease = await openStreamLease(c);
    let queued: Awaited<ReturnType<typeof queueTurn>>;
    try {
      queued = await queueTurn(c, turn, 0);
    } catch (err) {
      await lease.release();
      throw err;
    }
    const { session, runId, done } = queued;
    c.header("X-Run-Id", runId);
    const ids = { runId, model: turn.model, created };
    // Issue 33 (D-086): every piece waits on the key's check, so a key revoked, rotated or expired meanwhile gets nothing more.
    const guard = keyStreamGuard(c.get("principal"), c.env.DB, turn.agentId);
    // Issue 23: the answer's text as the incremental output guard releases it (src/runs/stream-release.ts), all of
    // it from ONE RPC answering a stream of frames (D-060), opened on the first read (none if the run has ended).
    // A key's stream gets a frame at least every idleMs even while idle, so the key is checked that often (D-086).
    const quietMs = Math.min(HEARTBEAT_MS, guard.idleMs);
    const open = () => session.releaseStream(runId, { quietMs, untilMs: deadline - Date.now() });
    const released = releaseReader<Done>(open, done as Done | null);
    return streamSSE(
      c,
      async (stream) => {
        let closed = false;
        stream.onAbort(() => {
          closed = true; // the run goes on; its result stays at GET /v1/runs/{run_id}
          releaseInBackground(c, lease);
        });
        try {
          await stream.writeSSE({ data: JSON.stringify(chunks.role(ids)) });
          const r = await followRelease(() => released.next(), done as Done | null, deadline, HEARTBEAT_MS, {
            write: async (text) => {
              await guard.check();
              await stream.writeSSE({ data: JSON.stringify(chunks.content(ids, text)) });
            },
            idle: guard.check, // every frame without text: at least every idleMs
            heartbeat: async () => {
              if (!closed) await stream.write(": still working\n\n");
            },
            keep: async () => !closed && (await lease.renew()) !== false,
          });
          runEnded(queued, r.run); // D-069
          if (closed) return;
          await guard.check(); // the end of the answer (or the run's error) is a piece too
          const outcome: Outcome = r.blocked ? { content: "", usage: r.run?.usage ?? NO_USAGE } : outcomeOf(r.run, runId, waitSeconds);
          if ("error" in outcome) {
            // OpenAI's clients read an `error` object in a stream as a failed request.
            await stream.writeSSE({ data: JSON.stringify(openAiError(outcome.error)) });
            return;
          }
          // The held words come from the final answer, released after the run's last commit (or the refusal).
          const tail = streamTail(r.released, r.roundStart, r.blocked, outcome.content);
          if (tail !== "") await stream.writeSSE({ data: JSON.stringify(chunks.content(ids, tail)) });
          await stream.writeSSE({ data: JSON.stringify(chunks.finish(ids)) });
          if (turn.includeUsage) await stream.writeSSE({ data: JSON.stringify(chunks.usage(ids, usageOf(outcome.usage))) });
          await stream.writeSSE({ data: "[DONE]" });
        } catch (err) {
          if (!(err instanceof KeyStreamEnded)) throw err;
          // OpenAI's clients read an `error` object in a stream as a failed request; no [DONE] follows.
          if (!closed) await stream.writeSSE({ data: JSON.stringify(openAiError(err.error)) });
        } finally {
          await released.close(); // a stream left early (slot lost, client gone) is cancelled; the run goes on
          await lease.release();
        }
      },
      async (err, stream) => {
        // After the stream opened, a failure can only be told in it (the status line is gone).
        c.get("logger").log("error", "http.error", {
          request_id: c.get("requestId") ?? "",
          code: "internal.error",
          status: 500,
          error_name: err.name,
          error_message: "the stream of a chat completion failed",
        });
        await stream.writeSSE({ data: JSON.stringify(openAiError(new GatewayError("internal.error", "internal error"))) });
      },
    );
  });

  return app;
}

import { readFileSync } from "node:fs";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { closedLoop, type GatewayBench, latencySummary, median, round, sequential, startGatewayBench } from "./support/devserver";

const CONCURRENCY = 8;

type Listener = (req: IncomingMessage, res: ServerResponse) => void;

interface RunView {
  id: string;
  status: string;
  tool_calls: number;
  output: string;
}

/** The offline model, with the server-side time of every chat completion recorded (arrival → 'finish'). */
async function startModel(root: string, port: number): Promise<{ server: Server; calls: number[] }> {
  // Loaded at run time from the project (a plain .mjs without type declarations; the bench bundle has no relative base).
  const { createLocalModelServer } = (await import(pathToFileURL(join(root, "scripts", "local-model.mjs")).href)) as {
    createLocalModelServer: () => Server;
  };
  const server = createLocalModelServer();
  const calls: number[] = [];
  const [inner] = server.listeners("request") as Listener[];
  if (!inner) throw new Error("turn bench: the local model server has no request listener");
  server.removeAllListeners("request");
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    if (req.method === "POST" && (req.url ?? "").startsWith("/v1/chat/completions")) {
      const t0 = performance.now();
      res.on("finish", () => calls.push(performance.now() - t0));
    }
    inner(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        new Error(
          err.code === "EADDRINUSE"
            ? `turn bench: 127.0.0.1:${port} is in use`
            : `turn bench: the local model cannot listen: ${err.message}`,
        ),
      ),
    );
    server.listen(port, "127.0.0.1", () => resolve());
  });
  return { server, calls };
}

/** What {@link prepare} sets up: the gateway under `wrangler dev`, its offline model, an API token. */
export type Prepared = GatewayBench<{ server: Server; calls: number[] }> & { apiToken: string; adminToken: string };

/**
 * The set-up, apart from the measurement: a copy of the project, the offline model, the D1 schema and
 * `wrangler dev`. bench/run.mjs (--quick) starts it beside the baseline bench's own start-up; the baseline
 * waits for it before measuring, so an idle gateway is all that runs beside the reference figures.
 */
export async function prepare(_quick: boolean): Promise<Prepared> {
  const apiToken = `bench-${crypto.randomUUID().replaceAll("-", "")}`; // 38 characters
  const adminToken = `admin-${crypto.randomUUID().replaceAll("-", "")}`;
  const gateway = await startGatewayBench({
    tag: "turn bench",
    devVars: `GATEWAY_ADMIN_TOKEN=${adminToken}\nGATEWAY_API_TOKENS=bench:${apiToken}\n`,
    startModel,
  });
  return { ...gateway, apiToken, adminToken };
}

/** The message that makes the offline model call one tool (`fs.list_dir`), and the start of its reply after the result. */
export const TOOL_MESSAGE = "list files";
export const TOOL_REPLY = "The tool fs.list_dir worked.";

/**
 * Tool-round turns in 8 long-lived conversations, like the peer's (one tool call in a conversation that stays
 * open): `turn(c)` is conversation c's next turn (resolving its run id). Every turn is checked: its reply is the
 * one the model gives after the tool's result, and the model server saw exactly 2 calls per turn (the one that
 * asked for the tool, the one that answered after it), counted over the whole phase. The warm-up turns are also
 * read back (`toolCalls`, outside the timing): exactly 1 tool call each.
 */
export async function toolRoundConversations(o: {
  endpoint: string;
  quick: boolean;
  n: number;
  seconds: number;
  group: number;
  calls: number[];
  turn: (conversation: number) => Promise<string>;
  toolCalls?: (runId: string) => Promise<number>;
}): Promise<Record<string, unknown>> {
  const warm = await Promise.all(Array.from({ length: CONCURRENCY }, (_, c) => o.turn(c)));
  if (o.toolCalls)
    for (const id of warm) {
      const made = await o.toolCalls(id);
      if (made !== 1) throw new Error(`turn bench: tool-round run ${id} made ${made} tool calls, expected 1`);
    }
  let turns = 0;
  const counted = (c: number) => {
    turns++;
    return o.turn(c);
  };
  o.calls.length = 0;
  const seq = o.quick ? null : await sequential(o.n, o.group, () => counted(0));
  const conc = await closedLoop({ concurrency: CONCURRENCY, seconds: o.quick ? 1 : o.seconds, group: o.group, once: (c) => counted(c) });
  if (o.calls.length !== 2 * turns)
    throw new Error(`turn bench: ${turns} tool-round turns made ${o.calls.length} model calls, expected ${2 * turns} (2 each)`);
  o.calls.length = 0;
  return {
    endpoint: o.endpoint,
    message: TOOL_MESSAGE,
    turns_per_s_8_concurrent: conc.per_s,
    turns_checked: turns,
    model_calls_per_turn: 2,
    concurrent: { ...latencySummary(conc.latency), seconds: conc.seconds, workerd_cpu_ms_per_turn: conc.workerd_cpu_ms_per_op },
    ...(seq ? { sequential: { ...latencySummary(seq.latency), workerd_cpu_ms_per_turn: seq.workerd_cpu_ms_per_op } } : {}),
  };
}

export async function run(quick: boolean, prepared?: Promise<Prepared>) {
  const n = quick ? 8 : 100;
  const warmup = quick ? 3 : 20;
  const seconds = quick ? 2 : 15;
  const sessionTurns = quick ? 0 : 60; // --quick skips the growth check

  const gateway = await (prepared ?? prepare(quick));
  const { logFile, apiToken, model, dev } = gateway;
  const child = dev.child;
  const calls = model.calls;
  let ok = false;
  try {
    const base = dev.base;
    const group = child.pid as number;
    const auth = { authorization: `Bearer ${apiToken}`, "content-type": "application/json" };

    /**
     * One POST /v1/runs with Prefer: wait; client and model time, with the run checked.
     * `expectModelCalls` null: not checked (concurrent turns share the recorder).
     */
    async function turn(message: string, expectTools: number, expectModelCalls: number | null): Promise<{ ms: number; model: number }> {
      if (expectModelCalls !== null) calls.length = 0;
      const t0 = performance.now();
      const res = await fetch(`${base}/v1/runs`, {
        method: "POST",
        headers: { ...auth, prefer: "wait=30" },
        body: JSON.stringify({ agent_id: "main", message }),
      });
      const text = await res.text();
      const ms = performance.now() - t0;
      if (res.status !== 200) throw new Error(`turn bench: POST /v1/runs answered ${res.status}: ${text}`);
      const view = JSON.parse(text) as RunView;
      if (view.status !== "completed")
        throw new Error(
          `turn bench: run ${view.id} ended ${view.status}: ${text}\n(did a concurrent build rewrite src/generated/config.ts? wrangler dev reloads on it)`,
        );
      if (view.tool_calls !== expectTools) throw new Error(`turn bench: run ${view.id} made ${view.tool_calls} tool calls: ${text}`);
      if (expectModelCalls !== null && calls.length !== expectModelCalls)
        throw new Error(`turn bench: run ${view.id} made ${calls.length} model calls, expected ${expectModelCalls}`);
      return { ms, model: calls.reduce((a, b) => a + b, 0) };
    }

    /** One chat message in the shared session, waited for on its event stream (until the terminal event closes it). */
    async function sessionTurn(): Promise<number> {
      const t0 = performance.now();
      const res = await fetch(`${base}/v1/chat/messages`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ user_id: "u", room_id: "bench", agent_id: "main", message: "hello" }),
      });
      const text = await res.text();
      if (res.status !== 202) throw new Error(`turn bench: POST /v1/chat/messages answered ${res.status}: ${text}`);
      const { id } = JSON.parse(text) as { id: string };
      const events = await fetch(`${base}/v1/runs/${id}/events`, { headers: { authorization: auth.authorization } });
      const stream = await events.text();
      const ms = performance.now() - t0;
      if (events.status !== 200) throw new Error(`turn bench: GET /v1/runs/${id}/events answered ${events.status}: ${stream}`);
      const types = [...stream.matchAll(/^event: (.+)$/gm)].map((m) => m[1]);
      if (types.at(-1) !== "run.completed") throw new Error(`turn bench: run ${id}'s stream ended with ${types.at(-1)}:\n${stream}`);
      return ms;
    }

    // Warm-up: isolates, Durable Object code, SQLite, connection pools.
    for (let i = 0; i < warmup; i++) {
      await turn("hello", 0, 1);
      await turn("list files", 1, 2);
    }

    const kinds = [
      { name: "plain", message: "hello", tools: 0, modelCalls: 1 },
      { name: "tool_round", message: "list files", tools: 1, modelCalls: 2 },
    ] as const;
    const result: Record<string, unknown> = {
      endpoint: "POST /v1/runs, Prefer: wait=30",
      model: "scripts/local-model.mjs (offline, zero latency)",
    };
    for (const k of kinds) {
      const modelMs: number[] = [];
      const seq = await sequential(n, group, async () => {
        const t = await turn(k.message, k.tools, k.modelCalls);
        modelMs.push(t.model);
      });
      const callsBefore = calls.length;
      const conc = await closedLoop({ concurrency: CONCURRENCY, seconds, group, once: () => turn(k.message, k.tools, null) });
      const concCalls = calls.length - callsBefore;
      calls.length = 0;
      if (concCalls < conc.completed * k.modelCalls)
        throw new Error(`turn bench: ${k.name}: ${concCalls} model calls for ${conc.completed} turns (expected ${k.modelCalls} each)`);
      result[k.name] = {
        turns_per_s_8_concurrent: conc.per_s,
        concurrent: { ...latencySummary(conc.latency), seconds: conc.seconds, workerd_cpu_ms_per_turn: conc.workerd_cpu_ms_per_op },
        sequential: {
          ...latencySummary(seq.latency),
          workerd_cpu_ms_per_turn: seq.workerd_cpu_ms_per_op,
          model_server_p50_ms: round(median(modelMs), 2),
        },
      };
    }

    // 8 concurrent conversations, each in its own long-lived session (as the peer's conversations are), through
    // the two conversational front doors: POST /v1/chat/completions with `user` (one request answers the turn),
    // and POST /v1/chat/messages + its event stream (two requests). Plain turns ("hello": 1 model call).
    /** One turn of a conversation through /v1/chat/completions, its reply checked; resolves the run id. */
    async function completionTurn(conversation: string, content: string, reply: string): Promise<string> {
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ model: "agent:main", user: conversation, messages: [{ role: "user", content }] }),
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`turn bench: POST /v1/chat/completions answered ${res.status}: ${text}`);
      const body = JSON.parse(text) as { object: string; choices: { message: { content: string }; finish_reason: string }[] };
      if (body.object !== "chat.completion" || !body.choices[0]?.message.content.startsWith(reply))
        throw new Error(`turn bench: /v1/chat/completions did not answer the turn: ${text.slice(0, 300)}`);
      return res.headers.get("x-run-id") ?? "";
    }
    const openAiTurn = (conversation: string) => completionTurn(conversation, "hello", "Hello from the offline model").then(() => {});
    async function chatMessagesTurn(conversation: string): Promise<void> {
      const res = await fetch(`${base}/v1/chat/messages`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ user_id: conversation, room_id: "bench-conversations", agent_id: "main", message: "hello" }),
      });
      const text = await res.text();
      if (res.status !== 202) throw new Error(`turn bench: POST /v1/chat/messages answered ${res.status}: ${text}`);
      const { id } = JSON.parse(text) as { id: string };
      const events = await fetch(`${base}/v1/runs/${id}/events`, { headers: { authorization: auth.authorization } });
      const stream = await events.text();
      if (!/^event: run\.completed$/m.test(stream)) throw new Error(`turn bench: run ${id} did not complete:\n${stream.slice(0, 300)}`);
    }
    const conversations: Record<string, unknown> = {};
    for (const [name, endpoint, once] of [
      ["openai_chat_completions", "POST /v1/chat/completions (user = conversation)", openAiTurn],
      ["chat_messages", "POST /v1/chat/messages + GET /v1/runs/{id}/events", chatMessagesTurn],
    ] as const) {
      // Each conversation's object exists and is warm (side by side: the objects are independent).
      await Promise.all(Array.from({ length: CONCURRENCY }, (_, c) => once(`${name}-${c}`)));
      const seq = quick ? null : await sequential(n, group, () => once(`${name}-0`));
      const conc = await closedLoop({ concurrency: CONCURRENCY, seconds: quick ? 1 : seconds, group, once: (c) => once(`${name}-${c}`) });
      conversations[name] = {
        endpoint,
        turns_per_s_8_concurrent: conc.per_s,
        concurrent: { ...latencySummary(conc.latency), seconds: conc.seconds, workerd_cpu_ms_per_turn: conc.workerd_cpu_ms_per_op },
        ...(seq ? { sequential: { ...latencySummary(seq.latency), workerd_cpu_ms_per_turn: seq.workerd_cpu_ms_per_op } } : {}),
      };
    }
    conversations.openai_tool_round = await toolRoundConversations({
      endpoint: "POST /v1/chat/completions (user = conversation), one tool call per turn",
      quick,
      n,
      seconds,
      group,
      calls,
      turn: (c) => completionTurn(`tool-round-${c}`, TOOL_MESSAGE, TOOL_REPLY),
      // Outside the timing: the run of a warm-up turn, as GET /v1/runs/{run_id} answers it.
      toolCalls: async (runId) => {
        const res = await fetch(`${base}/v1/runs/${runId}`, { headers: { authorization: auth.authorization } });
        return ((await res.json()) as RunView).tool_calls;
      },
    });
    result.conversations = conversations;
    calls.length = 0;

    // One session, many turns: the time per turn must not grow with the transcript.
    const session: number[] = [];
    for (let i = 0; i < sessionTurns; i++) session.push(await sessionTurn());

    // Warnings and errors the gateway logged (JSON lines) or wrangler printed, over the whole run.
    const problems = readFileSync(logFile, "utf8")
      .split("\n")
      .filter((line) => /"level":"(warn|error)"|\[ERROR\]|✘/.test(line));
    for (const line of problems.slice(0, 5)) console.error(`turn bench: wrangler log: ${line.slice(0, 300)}`);

    if (sessionTurns > 0) {
      const first = median(session.slice(0, 10));
      const last = median(session.slice(-10));
      result.session = {
        endpoint: "POST /v1/chat/messages + GET /v1/runs/{id}/events, one session",
        turns: sessionTurns,
        first10_median_ms: round(first),
        last10_median_ms: round(last),
        growth_ratio: round(last / first, 2),
      };
    }
    result.wrangler_log_warnings_errors = problems.length;
    ok = true;
    return result;
  } finally {
    await gateway.dispose(ok);
  }
}

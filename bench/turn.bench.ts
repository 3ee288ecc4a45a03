/**
 * Chat turns end to end, as a client experiences them (request sent → final
 * answer received): the real Worker under `wrangler dev` (workerd, local
 * Durable Objects, R2 and D1) against the offline model
 * (scripts/local-model.mjs: zero latency, a fixed script, served from this
 * process so that its own time per request can be measured and reported).
 * A turn is `POST /v1/runs` with `Prefer: wait` (one fresh isolated session
 * per run, so every turn also creates its Durable Object), checked: completed,
 * with the expected number of tool calls and model calls.
 *
 * (a) plain reply ("hello": 1 model call), (b) one tool round ("list files":
 * model → fs.list_dir → model, 2 model calls). For each: sequential
 * p50/p95/p99 and turns/s with 8 concurrent clients over a fixed window, with
 * workerd's CPU per turn from /proc (every workerd process of wrangler dev's
 * process group, utime + stime, over the phase ÷ turns). bench/run.mjs divides
 * the rates by the baseline Worker's (bench/baseline.bench.ts, same run) and
 * sets them beside the peer's (Cloudflare's Agents SDK, /work/shared/peers).
 *
 * Also: 8 concurrent conversations, each its own long-lived session, through
 * `POST /v1/chat/completions` (with `user`) and through `POST /v1/chat/messages`
 * + its event stream — turns/s side by side (issue 13's figure); and whether
 * the time per turn grows with the transcript (sequential chat messages in ONE
 * session).
 *
 * wrangler runs from a copy of the project (bench/support/devserver.ts
 * snapshotProject): its build step writes the development config into that
 * copy's src/generated/, and edits elsewhere in the tree cannot reload it.
 */
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  applyD1Migrations,
  closedLoop,
  DEV_CONFIG,
  latencySummary,
  MODEL_PORT,
  median,
  projectRoot,
  round,
  sequential,
  snapshotProject,
  startWranglerDev,
  stopChild,
  type WranglerDev,
} from "./support/devserver";

const CONCURRENCY = 8;

type Listener = (req: IncomingMessage, res: ServerResponse) => void;

interface RunView {
  id: string;
  status: string;
  tool_calls: number;
  output: string;
}

/** The offline model, with the server-side time of every chat completion recorded (arrival → 'finish'). */
async function startModel(root: string): Promise<{ server: Server; calls: number[] }> {
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
            ? `turn bench: 127.0.0.1:${MODEL_PORT} is in use (stop npm start first; ${DEV_CONFIG} points the model there)`
            : `turn bench: the local model cannot listen: ${err.message}`,
        ),
      ),
    );
    server.listen(MODEL_PORT, "127.0.0.1", () => resolve());
  });
  return { server, calls };
}

/** What {@link prepare} sets up: the gateway under `wrangler dev`, its offline model, an API token. */
export interface Prepared {
  tmp: string;
  logFile: string;
  apiToken: string;
  model: { server: Server; calls: number[] };
  dev: WranglerDev;
  interrupted: () => void;
}

/**
 * The set-up, apart from the measurement: a copy of the project, the offline model, the D1 schema and
 * `wrangler dev`. bench/run.mjs (--quick) starts it beside the baseline bench's own start-up; the baseline
 * waits for it before measuring, so an idle gateway is all that runs beside the reference figures.
 */
export async function prepare(_quick: boolean): Promise<Prepared> {
  const root = projectRoot("turn bench");
  const tmp = mkdtempSync(join(tmpdir(), "sophie-turn-bench-"));
  const persist = join(tmp, "state");
  const devVars = join(tmp, "dev.vars");
  const logFile = join(tmp, "wrangler.log");
  const apiToken = `bench-${crypto.randomUUID().replaceAll("-", "")}`; // 38 characters
  writeFileSync(devVars, `GATEWAY_ADMIN_TOKEN=admin-${crypto.randomUUID().replaceAll("-", "")}\nGATEWAY_API_TOKENS=bench:${apiToken}\n`);
  const { SOPHIE_CONFIG: _drop, ...baseEnv } = process.env;
  const env = { ...baseEnv, SOPHIE_CONFIG: DEV_CONFIG, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };

  let model: { server: Server; calls: number[] } | undefined;
  let child: ChildProcess | undefined;
  // Ctrl-C mid-run: the finally block would not run, so end wrangler's process group here.
  const interrupted = () => {
    if (child?.pid) {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    }
    rmSync(tmp, { recursive: true, force: true });
    process.exit(130);
  };
  process.once("SIGINT", interrupted);
  process.once("SIGTERM", interrupted);
  try {
    const work = snapshotProject(root, join(tmp, "tree"));
    model = await startModel(work);
    await applyD1Migrations(work, env, persist, "turn bench");
    const dev = await startWranglerDev({
      tag: "turn bench",
      root,
      cwd: work,
      args: ["--env-file", devVars, "--persist-to", persist],
      env,
      logFile,
    });
    child = dev.child;
    return { tmp, logFile, apiToken, model, dev, interrupted };
  } catch (err) {
    model?.server.closeAllConnections();
    if (model) await new Promise<void>((resolve) => (model as { server: Server }).server.close(() => resolve()));
    process.off("SIGINT", interrupted);
    process.off("SIGTERM", interrupted);
    console.error(`turn bench: wrangler's output kept in ${logFile}`);
    throw err;
  }
}

export async function run(quick: boolean, prepared?: Promise<Prepared>) {
  const n = quick ? 8 : 100;
  const warmup = quick ? 3 : 20;
  const seconds = quick ? 2 : 15;
  const sessionTurns = quick ? 0 : 60; // --quick skips the growth check

  const { tmp, logFile, apiToken, model, dev, interrupted } = await (prepared ?? prepare(quick));
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
    async function openAiTurn(conversation: string): Promise<void> {
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify({ model: "agent:main", user: conversation, messages: [{ role: "user", content: "hello" }] }),
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`turn bench: POST /v1/chat/completions answered ${res.status}: ${text}`);
      const body = JSON.parse(text) as { object: string; choices: { message: { content: string }; finish_reason: string }[] };
      if (body.object !== "chat.completion" || !body.choices[0]?.message.content.startsWith("Hello from the offline model"))
        throw new Error(`turn bench: /v1/chat/completions did not answer the turn: ${text.slice(0, 300)}`);
    }
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
    await stopChild(child, false); // its directory goes next
    model.server.closeAllConnections();
    await new Promise<void>((resolve) => model.server.close(() => resolve()));
    process.off("SIGINT", interrupted);
    process.off("SIGTERM", interrupted);
    // wrangler's output is kept when it helps: after a failure, or with SOPHIE_BENCH_KEEP=1.
    if (ok && !process.env.SOPHIE_BENCH_KEEP) rmSync(tmp, { recursive: true, force: true });
    else console.error(`turn bench: wrangler's output kept in ${logFile}`);
  }
}

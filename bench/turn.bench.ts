/**
 * Gateway overhead per turn, end to end: the real Worker under `wrangler dev`
 * (workerd, local Durable Objects, R2 and D1) against the offline model
 * (scripts/local-model.mjs), which answers in well under a millisecond and is
 * served from this process so that its own time per request can be measured
 * and taken out. Overhead = client time per turn − model server time.
 *
 * Baseline, measured in the same run and interleaved with the turns: a
 * `GET /healthz` round trip, the floor of any route through wrangler dev on
 * this machine. The peer benchmark (Cloudflare's Agents SDK, measured the same
 * way on the same machine) did a plain turn in 17–18 ms and one tool round in
 * 22–23 ms (medians), with about 18 ms of workerd CPU per turn.
 *
 * Also: plain turns/s with 8 concurrent clients (and workerd's CPU per turn
 * over that phase, from /proc), and whether the time per turn grows with the
 * transcript (sequential turns in ONE chat session).
 *
 * wrangler's build step writes src/generated/config.ts from the development
 * config while it runs; the finally block rebuilds it from config/gateway.json5.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  applyD1Migrations,
  DEV_CONFIG,
  freePort,
  MODEL_PORT,
  median,
  projectRoot,
  quantile,
  restoreGenerated as restoreGeneratedFrom,
  round,
  sleep,
  stopChild,
  workerdCpuMs,
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

export async function run(quick: boolean) {
  const root = projectRoot("turn bench");
  const n = quick ? 40 : 200;
  const warmup = 20;
  const sessionTurns = quick ? 30 : 100;
  const concurrentTurns = quick ? 80 : 400;

  const tmp = mkdtempSync(join(tmpdir(), "sophie-turn-bench-"));
  const persist = join(tmp, "state");
  const devVars = join(tmp, "dev.vars");
  const logFile = join(tmp, "wrangler.log");
  const apiToken = `bench-${crypto.randomUUID().replaceAll("-", "")}`; // 38 characters
  writeFileSync(devVars, `GATEWAY_ADMIN_TOKEN=admin-${crypto.randomUUID().replaceAll("-", "")}\nGATEWAY_API_TOKENS=bench:${apiToken}\n`);
  const wrangler = join(root, "node_modules", ".bin", "wrangler");
  const { SOPHIE_CONFIG: _drop, ...baseEnv } = process.env;
  const env = { ...baseEnv, SOPHIE_CONFIG: DEV_CONFIG, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };

  let model: { server: Server; calls: number[] } | undefined;
  let dev: ChildProcess | undefined;
  let logFd: number | undefined;
  let ok = false;
  // wrangler's build step bundled the development config into src/generated/config.ts: put the shipped one back.
  const restoreGenerated = () => restoreGeneratedFrom(root, baseEnv, "turn bench");
  // Ctrl-C mid-run: the finally block would not run, so end wrangler's process group and restore here.
  const interrupted = () => {
    if (dev?.pid) {
      try {
        process.kill(-dev.pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    }
    restoreGenerated();
    rmSync(tmp, { recursive: true, force: true });
    process.exit(130);
  };
  process.once("SIGINT", interrupted);
  process.once("SIGTERM", interrupted);
  try {
    model = await startModel(root);
    const calls = model.calls;

    applyD1Migrations(root, env, persist, "turn bench");

    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    logFd = openSync(logFile, "w");
    dev = spawn(
      wrangler,
      ["dev", "--ip", "127.0.0.1", "--port", String(port), "--env-file", devVars, "--persist-to", persist],
      // Its own process group, so that the finally block ends workerd with it.
      { cwd: root, env, stdio: ["ignore", logFd, logFd], detached: true },
    );
    const started = performance.now();
    for (;;) {
      if (dev.exitCode !== null || dev.signalCode !== null)
        throw new Error(`turn bench: wrangler dev exited early:\n${readFileSync(logFile, "utf8")}`);
      if (performance.now() - started > 90_000)
        throw new Error(`turn bench: no GET /healthz 200 within 90 s:\n${readFileSync(logFile, "utf8")}`);
      const res = await fetch(`${base}/healthz`).catch(() => null);
      if (res?.status === 200) {
        await res.arrayBuffer();
        break;
      }
      await res?.arrayBuffer();
      await sleep(250);
    }

    const auth = { authorization: `Bearer ${apiToken}`, "content-type": "application/json" };

    async function healthz(): Promise<number> {
      const t0 = performance.now();
      const res = await fetch(`${base}/healthz`);
      await res.arrayBuffer();
      const ms = performance.now() - t0;
      if (res.status !== 200) throw new Error(`turn bench: GET /healthz answered ${res.status}`);
      return ms;
    }

    /**
     * One POST /v1/runs with Prefer: wait; client and model time, with the run checked.
     * `expectModelCalls` null: not checked (concurrent turns share the recorder).
     */
    async function turn(message: string, expectTools: number, expectModelCalls: number | null): Promise<{ ms: number; model: number }> {
      calls.length = 0;
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
      await healthz();
      await turn("hello", 0, 1);
      await turn("list files", 1, 2);
    }

    // Interleaved, so that the baseline and the turns see the same machine.
    const health: number[] = [];
    const plain: number[] = [];
    const plainModel: number[] = [];
    const plainOverhead: number[] = [];
    const tool: number[] = [];
    const toolOverhead: number[] = [];
    for (let i = 0; i < n; i++) {
      health.push(await healthz());
      const p = await turn("hello", 0, 1);
      plain.push(p.ms);
      plainModel.push(p.model);
      plainOverhead.push(p.ms - p.model);
      const t = await turn("list files", 1, 2);
      tool.push(t.ms);
      toolOverhead.push(t.ms - t.model);
    }

    // Throughput: 8 clients, each running plain turns back to back, until the fixed total is done.
    // workerd's CPU per turn is taken over this phase (plain turns only), as the peer benchmark reports it.
    const ticks = Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout?.trim()) || 100;
    const cpu0 = workerdCpuMs(dev.pid as number, ticks);
    let issued = 0;
    const c0 = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (issued < concurrentTurns) {
          issued++;
          await turn("hello", 0, null);
        }
      }),
    );
    const turnsPerS = concurrentTurns / ((performance.now() - c0) / 1000);
    const cpu1 = workerdCpuMs(dev.pid as number, ticks);
    const workerdCpuPerTurn = cpu0 === null || cpu1 === null ? null : (cpu1 - cpu0) / concurrentTurns;

    // One session, many turns: the time per turn must not grow with the transcript.
    const session: number[] = [];
    for (let i = 0; i < sessionTurns; i++) session.push(await sessionTurn());
    const first10 = median(session.slice(0, 10));
    const last10 = median(session.slice(-10));

    // Warnings and errors the gateway logged (JSON lines) or wrangler printed, over the whole run.
    const problems = readFileSync(logFile, "utf8")
      .split("\n")
      .filter((line) => /"level":"(warn|error)"|\[ERROR\]|✘/.test(line));
    for (const line of problems.slice(0, 5)) console.error(`turn bench: wrangler log: ${line.slice(0, 300)}`);

    const healthMedian = median(health);
    const result = {
      turns: n,
      healthz_median_ms: round(healthMedian),
      plain_turn_median_ms: round(median(plain)),
      plain_model_median_ms: round(median(plainModel), 2),
      plain_overhead_median_ms: round(median(plainOverhead)),
      plain_overhead_p90_ms: round(quantile(plainOverhead, 0.9)),
      tool_turn_median_ms: round(median(tool)),
      tool_overhead_median_ms: round(median(toolOverhead)),
      plain_overhead_vs_healthz: round(median(plainOverhead) / healthMedian, 2),
      tool_overhead_vs_healthz: round(median(toolOverhead) / healthMedian, 2),
      turns_per_s_8_concurrent: round(turnsPerS),
      workerd_cpu_ms_per_plain_turn: workerdCpuPerTurn === null ? null : round(workerdCpuPerTurn),
      session_turns: sessionTurns,
      session_turn_first10_median_ms: round(first10),
      session_turn_last10_median_ms: round(last10),
      session_growth_ratio: round(last10 / first10, 2),
      wrangler_log_warnings_errors: problems.length,
    };
    ok = true;
    return result;
  } finally {
    await stopChild(dev);
    if (logFd !== undefined) closeSync(logFd);
    model?.server.closeAllConnections();
    if (model) await new Promise<void>((resolve) => (model as { server: Server }).server.close(() => resolve()));
    restoreGenerated();
    process.off("SIGINT", interrupted);
    process.off("SIGTERM", interrupted);
    // wrangler's output is kept when it helps: after a failure once wrangler ran, or with SOPHIE_BENCH_KEEP=1.
    if ((ok || logFd === undefined) && !process.env.SOPHIE_BENCH_KEEP) rmSync(tmp, { recursive: true, force: true });
    else console.error(`turn bench: wrangler's output kept in ${logFile}`);
  }
}

/**
 * The cron tick with 1,000 jobs of which 100 are due (issue 8), end to end: the
 * real Worker under `wrangler dev --test-scheduled` (workerd, local D1 and
 * Durable Objects) with the offline model (scripts/local-model.mjs) served from
 * this process, since the dispatched runs call it (after the tick, in their own
 * SessionDOs).
 *
 * Setup: 900 `@every 1h` jobs through the admin API (never due during the run).
 * Each round then creates 100 one-shot jobs for one RFC3339 time a few seconds
 * ahead, so the table holds 1,000 enabled jobs, and:
 *
 * - baseline: while the one-shots are still pending, `GET /__scheduled` runs
 *   the Worker's scheduled() handler over the same 1,000 jobs with none due (its
 *   due query, the heartbeat/take-over batch and the claimed-firings query, all
 *   empty);
 * - once their time has passed, the measured tick: 100 due, claimed in one D1
 *   batch and handed to 100 fresh SessionDOs (16 at a time by default).
 *
 * Both ticks are timed twice: client wall time of `GET /__scheduled`, and the
 * tick's own `duration_ms` from its `scheduler.tick` log line (worker-side, no
 * HTTP), whose `due`/`claimed`/`dispatched` must read 100 (0 for the baseline),
 * with nothing skipped, failed or deferred, or the bench fails. workerd's CPU
 * over the due tick is read from /proc (Linux) to tell work from waiting.
 * wrangler's `/__scheduled` middleware awaits scheduled() before it answers, so
 * no polling is needed; the bench checks it every round: when the request
 * returns, all 100 firings must already be `dispatched` with a run id
 * (GET /api/admin/jobs/{id}/firings).
 * The round then waits until its 100 runs have completed and the run index shows
 * nothing queued or running (so the next round starts quiet), and deletes its
 * one-shots: every tick sees 1,000 jobs. A `GET /healthz` round trip is sampled
 * alongside for context (the floor of any request through wrangler dev here).
 *
 * Figures: `due_vs_idle_ratio` = median due tick ÷ median idle tick (client
 * wall time), and `ms_per_firing` = (median due − median idle) ÷ 100, the cost
 * one due job adds to a tick. Absolute times are for context only (the machine
 * is noisy); the ratio moves with its small, noisy denominator (tens of ms),
 * `ms_per_firing` much less. The worker-side `duration_ms` can read lower than
 * the client time: workerd's clock only advances at I/O, and the runs already
 * started compete with the tick for the same thread. A first, unrecorded round warms up isolates, SQLite and DO code.
 * `runs_drained_median_ms` is from the due tick's answer until its 100 runs
 * have completed (context: the runs start while the tick is still dispatching).
 *
 * Reading them: the idle tick is three D1 round trips. The due tick is almost
 * all hand-overs: an `isolated` firing creates a fresh SessionDO (its SQLite
 * schema, session row, D1 session index, the run and its audit record), and
 * wrangler dev runs every object in one workerd process, so they queue for the
 * same CPU: `scheduler.dispatchConcurrency` cannot hide that here, and the time
 * per firing on Cloudflare (objects spread over machines) should be lower.
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

const JOBS = 1000;
const DUE = 100;
/**
 * How far ahead a round's one-shots are set, at least: room to create them and run the baseline tick
 * first. Creating a job is slow-ish (each is audited in the agent's main session, one object, so the
 * POSTs are serialised there), so the lead grows to 1.5× the time the last 100 creations took.
 */
const MIN_LEAD_MS = 3000;
/** The baseline tick must start at least this long before the one-shots fall due. */
const BASELINE_MARGIN_MS = 400;
/** Concurrent admin API requests while seeding, checking and deleting (not while timing). */
const API_CONCURRENCY = 8;
const HEALTHZ_PER_ROUND = 5;
const TAG = "scheduler bench";

type Listener = (req: IncomingMessage, res: ServerResponse) => void;

/** The fields of a `scheduler.tick` log line the bench reads. */
interface TickLine {
  due: number;
  claimed: number;
  dispatched: number;
  skipped: number;
  failed: number;
  deferred: number;
  duration_ms: number;
}

interface RunRow {
  run_id: string;
  status: string;
  source: string;
}

interface FiringRow {
  status: string;
  run_id: string | null;
}

/** Runs `task` over `items`, `width` at a time. */
async function pool<T>(items: readonly T[], width: number, task: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, items.length) }, async () => {
      while (next < items.length) await task(items[next++] as T);
    }),
  );
}

/** The offline model, listening where the dev config expects it; counts the chat completions it answers. */
async function startModel(root: string): Promise<{ server: Server; completions: () => number }> {
  // Loaded at run time from the project (a plain .mjs without type declarations; the bundle has no relative base).
  const { createLocalModelServer } = (await import(pathToFileURL(join(root, "scripts", "local-model.mjs")).href)) as {
    createLocalModelServer: () => Server;
  };
  const server = createLocalModelServer();
  let count = 0;
  const [inner] = server.listeners("request") as Listener[];
  if (!inner) throw new Error(`${TAG}: the local model server has no request listener`);
  server.removeAllListeners("request");
  server.on("request", (req: IncomingMessage, res: ServerResponse) => {
    if (req.method === "POST" && (req.url ?? "").startsWith("/v1/chat/completions")) count++;
    inner(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) =>
      reject(
        new Error(
          err.code === "EADDRINUSE"
            ? `${TAG}: 127.0.0.1:${MODEL_PORT} is in use (npm start, or another bench?); ${DEV_CONFIG} points the model there, so stop that first`
            : `${TAG}: the local model cannot listen: ${err.message}`,
        ),
      ),
    );
    server.listen(MODEL_PORT, "127.0.0.1", () => resolve());
  });
  return { server, completions: () => count };
}

/** The `scheduler.tick` lines wrangler has written so far, oldest first. */
function tickLines(logFile: string): TickLine[] {
  return readFileSync(logFile, "utf8")
    .split("\n")
    .filter((line) => line.includes('"event":"scheduler.tick"'))
    .map((line) => JSON.parse(line.slice(line.indexOf("{"))) as TickLine);
}

export async function run(quick: boolean) {
  const root = projectRoot(TAG);
  const rounds = quick ? 3 : 10;

  const tmp = mkdtempSync(join(tmpdir(), "sophie-scheduler-bench-"));
  const persist = join(tmp, "state");
  const devVars = join(tmp, "dev.vars");
  const logFile = join(tmp, "wrangler.log");
  const adminToken = `admin-${crypto.randomUUID().replaceAll("-", "")}`;
  writeFileSync(devVars, `GATEWAY_ADMIN_TOKEN=${adminToken}\n`);
  const wrangler = join(root, "node_modules", ".bin", "wrangler");
  const { SOPHIE_CONFIG: _drop, ...baseEnv } = process.env;
  const env = { ...baseEnv, SOPHIE_CONFIG: DEV_CONFIG, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };

  let model: { server: Server; completions: () => number } | undefined;
  let dev: ChildProcess | undefined;
  let logFd: number | undefined;
  let ok = false;
  // wrangler's build step bundled the development config into src/generated/config.ts: put the shipped one back.
  const restoreGenerated = () => restoreGeneratedFrom(root, baseEnv, TAG);
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
    const completions = model.completions;

    applyD1Migrations(root, env, persist, TAG);

    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    logFd = openSync(logFile, "w");
    dev = spawn(
      wrangler,
      ["dev", "--ip", "127.0.0.1", "--port", String(port), "--env-file", devVars, "--persist-to", persist, "--test-scheduled"],
      // Its own process group, so that the finally block ends workerd with it.
      { cwd: root, env, stdio: ["ignore", logFd, logFd], detached: true },
    );
    const started = performance.now();
    for (;;) {
      if (dev.exitCode !== null || dev.signalCode !== null)
        throw new Error(`${TAG}: wrangler dev exited early:\n${readFileSync(logFile, "utf8")}`);
      if (performance.now() - started > 90_000)
        throw new Error(`${TAG}: no GET /healthz 200 within 90 s:\n${readFileSync(logFile, "utf8")}`);
      const res = await fetch(`${base}/healthz`).catch(() => null);
      if (res?.status === 200) {
        await res.arrayBuffer();
        break;
      }
      await res?.arrayBuffer();
      await sleep(250);
    }

    /** One admin API call; anything but `expect` fails the bench. */
    async function admin<T>(method: string, path: string, expect: number, body?: unknown): Promise<T> {
      const res = await fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal: AbortSignal.timeout(60_000),
      });
      const text = await res.text();
      if (res.status !== expect) throw new Error(`${TAG}: ${method} ${path} answered ${res.status}: ${text.slice(0, 500)}`);
      return JSON.parse(text) as T;
    }

    const createJob = (jobId: string, schedule: string) =>
      admin("POST", "/api/admin/jobs", 201, {
        job_id: jobId,
        agent_id: "main",
        schedule,
        message: "hello",
        mode: "isolated",
        enabled: true,
      });

    async function healthz(): Promise<number> {
      const t0 = performance.now();
      const res = await fetch(`${base}/healthz`);
      await res.arrayBuffer();
      const ms = performance.now() - t0;
      if (res.status !== 200) throw new Error(`${TAG}: GET /healthz answered ${res.status}`);
      return ms;
    }

    const clockTicks = Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout?.trim()) || 100;
    const group = dev.pid as number;

    /**
     * One tick through `/__scheduled`: client wall time, workerd's CPU over that time (the runs the tick
     * starts included: they begin in their SessionDOs while it is still handing over), and the tick's
     * own log line, checked against `expectDue`.
     */
    let ticks = 0;
    async function tick(expectDue: number): Promise<{ ms: number; workerMs: number; cpuMs: number | null }> {
      const cpu0 = workerdCpuMs(group, clockTicks);
      const t0 = performance.now();
      const res = await fetch(`${base}/__scheduled?cron=*+*+*+*+*`, { signal: AbortSignal.timeout(120_000) });
      const text = await res.text();
      const ms = performance.now() - t0;
      const cpu1 = workerdCpuMs(group, clockTicks);
      if (res.status !== 200) throw new Error(`${TAG}: GET /__scheduled answered ${res.status}: ${text.slice(0, 500)}`);
      ticks++;
      // wrangler relays workerd's console output asynchronously: give the line a moment to reach the file.
      let lines = tickLines(logFile);
      for (const deadline = performance.now() + 10_000; lines.length < ticks && performance.now() < deadline; ) {
        await sleep(50);
        lines = tickLines(logFile);
      }
      if (lines.length !== ticks)
        throw new Error(`${TAG}: expected ${ticks} scheduler.tick log lines, found ${lines.length} (see ${logFile})`);
      const line = lines.at(-1) as TickLine;
      if (
        line.due !== expectDue ||
        line.claimed !== expectDue ||
        line.dispatched !== expectDue ||
        line.skipped + line.failed + line.deferred !== 0
      )
        throw new Error(`${TAG}: tick expected ${expectDue} due and dispatched, logged ${JSON.stringify(line)}`);
      return { ms, workerMs: line.duration_ms, cpuMs: cpu0 === null || cpu1 === null ? null : cpu1 - cpu0 };
    }

    /** Runs of the index in `status` (newest first, at most 200). */
    const runsIn = async (status: string) =>
      (await admin<{ runs: RunRow[] }>("GET", `/api/admin/runs?status=${status}&limit=200`, 200)).runs;

    // 900 jobs that stay out of the way: the first slot of `@every 1h` is an hour after it is set.
    const seed = Array.from({ length: JOBS - DUE }, (_, i) => `every-${String(i).padStart(4, "0")}`);
    const s0 = performance.now();
    await pool(seed, API_CONCURRENCY, async (id) => void (await createJob(id, "@every 1h")));
    const seedMs = performance.now() - s0;
    let createMs = (seedMs / seed.length) * DUE; // expected time to create a round's one-shots

    const due: number[] = [];
    const dueWorker: number[] = [];
    const dueCpu: number[] = [];
    const idle: number[] = [];
    const idleWorker: number[] = [];
    const drain: number[] = [];
    const health: number[] = [];
    let modelCalls = 0;

    // Round 0 warms up (not recorded).
    for (let r = 0; r <= rounds; r++) {
      const record = r > 0;
      for (let i = 0; i < HEALTHZ_PER_ROUND; i++) {
        const ms = await healthz();
        if (record) health.push(ms);
      }

      // 100 one-shots for one instant ahead: 1,000 enabled jobs, none due yet.
      const ids = Array.from({ length: DUE }, (_, i) => `once-r${String(r).padStart(2, "0")}-${String(i).padStart(3, "0")}`);
      const lead = Math.max(MIN_LEAD_MS, Math.ceil(1.5 * createMs) + BASELINE_MARGIN_MS);
      const at = Date.now() + lead;
      const schedule = new Date(at).toISOString();
      const c0 = performance.now();
      await pool(ids, API_CONCURRENCY, async (id) => void (await createJob(id, schedule)));
      createMs = performance.now() - c0;

      // Baseline: the same 1,000 jobs, none due. No tick runs unless this bench asks, so a slow creation
      // (a busy machine) only costs this round's baseline sample, never the measured tick.
      if (Date.now() <= at - BASELINE_MARGIN_MS) {
        const b = await tick(0);
        if (record) {
          idle.push(b.ms);
          idleWorker.push(b.workerMs);
        }
      } else {
        console.error(`${TAG}: round ${r}: creating ${DUE} jobs took ${Math.round(createMs)} ms (${lead} ms lead); no baseline this round`);
      }

      // The measured tick: all 100 one-shots due.
      await sleep(Math.max(0, at - Date.now() + 50));
      const callsBefore = completions();
      const t = await tick(DUE);
      const returned = performance.now();
      if (record) {
        due.push(t.ms);
        dueWorker.push(t.workerMs);
        if (t.cpuMs !== null) dueCpu.push(t.cpuMs);
      }

      // /__scheduled answered only after scheduled() finished: every firing is dispatched already.
      const runIds = new Set<string>();
      await pool(ids, API_CONCURRENCY, async (id) => {
        const { firings } = await admin<{ firings: FiringRow[] }>("GET", `/api/admin/jobs/${id}/firings`, 200);
        const f = firings[0];
        if (firings.length !== 1 || f?.status !== "dispatched" || !f.run_id)
          throw new Error(`${TAG}: right after /__scheduled returned, job ${id}'s firings are ${JSON.stringify(firings)}`);
        runIds.add(f.run_id);
      });

      // Quiet before the next round: the 100 runs completed, nothing queued or running.
      for (const deadline = performance.now() + 120_000; ; ) {
        const [queued, running, completed] = await Promise.all([runsIn("queued"), runsIn("running"), runsIn("completed")]);
        const done = completed.filter((x) => runIds.has(x.run_id)).length;
        if (queued.length === 0 && running.length === 0 && done === DUE) break;
        if (performance.now() > deadline)
          throw new Error(
            `${TAG}: round ${r}: after 120 s, ${done}/${DUE} runs completed, ${queued.length} queued, ${running.length} running`,
          );
        await sleep(100);
      }
      if (record) drain.push(performance.now() - returned);
      modelCalls += completions() - callsBefore;

      await pool(ids, API_CONCURRENCY, async (id) => void (await admin("DELETE", `/api/admin/jobs/${id}`, 200)));
    }

    const notCompleted = (await Promise.all(["failed", "cancelled", "awaiting_approval"].map(runsIn))).flat();
    if (notCompleted.length > 0)
      throw new Error(`${TAG}: runs that did not complete: ${JSON.stringify(notCompleted.slice(0, 5))} (${notCompleted.length})`);
    if (modelCalls !== (rounds + 1) * DUE)
      throw new Error(`${TAG}: the offline model answered ${modelCalls} chat completions for ${(rounds + 1) * DUE} runs`);
    let left = 0;
    for (let after = ""; ; ) {
      const page = await admin<{ jobs: unknown[]; next_after: string | null }>("GET", `/api/admin/jobs?limit=500&after=${after}`, 200);
      left += page.jobs.length;
      if (page.next_after === null) break;
      after = page.next_after;
    }
    if (left !== JOBS - DUE) throw new Error(`${TAG}: ${left} jobs left at the end, expected ${JOBS - DUE}`);

    // Warnings and errors the gateway logged (JSON lines) or wrangler printed, over the whole run.
    const problems = readFileSync(logFile, "utf8")
      .split("\n")
      .filter((line) => /"level":"(warn|error)"|\[ERROR\]|\[WARNING\]|✘/.test(line));
    for (const line of problems.slice(0, 5)) console.error(`${TAG}: wrangler log: ${line.slice(0, 300)}`);

    const dueMedian = median(due);
    if (idle.length === 0) throw new Error(`${TAG}: no round left time for a baseline tick (the machine is too busy)`);
    const idleMedian = median(idle);
    const result = {
      jobs: JOBS,
      due_per_tick: DUE,
      rounds,
      seed_900_jobs_s: round(seedMs / 1000),
      tick_100_due_median_ms: round(dueMedian),
      tick_100_due_p90_ms: round(quantile(due, 0.9)),
      tick_100_due_worker_ms_median: round(median(dueWorker)),
      tick_100_due_workerd_cpu_ms_median: dueCpu.length > 0 ? round(median(dueCpu)) : null,
      tick_0_due_median_ms: round(idleMedian),
      tick_0_due_worker_ms_median: round(median(idleWorker)),
      due_vs_idle_ratio: round(dueMedian / idleMedian, 2),
      ms_per_firing: round((dueMedian - idleMedian) / DUE, 2),
      runs_drained_median_ms: round(median(drain)),
      healthz_median_ms: round(median(health)),
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
    else console.error(`${TAG}: wrangler's output kept in ${logFile}`);
  }
}

import { readFileSync } from "node:fs";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  type GatewayBench,
  median,
  quantile,
  clockTicks as readClockTicks,
  round,
  sleep,
  startGatewayBench,
  workerdCpuMs,
} from "./support/devserver";

/**
 * How far ahead a round's one-shots are set, at least: room to create them and run the baseline tick
 * first. Creating a job is slow-ish (each is audited in the agent's main session, one object, so the
 * POSTs are serialised there), so the lead grows to 1.5× the time the last 100 creations took.
 */
const MIN_LEAD_MS = 3000;
/** --quick's 20 jobs are created in well under a second: a shorter lead keeps the smoke run short. */
const QUICK_MIN_LEAD_MS = 1500;
/** The baseline tick must start at least this long before the one-shots fall due. */
const BASELINE_MARGIN_MS = 400;
/** Concurrent admin API requests while seeding, checking and deleting (not while timing). */
const API_CONCURRENCY = 8;
const HEALTHZ_PER_ROUND = 5;
/** A first guess of the time to create one job through the admin API (ms), until a round has measured it. */
const CREATE_MS_GUESS = 60;
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
async function startModel(root: string, port: number): Promise<{ server: Server; completions: () => number }> {
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
          err.code === "EADDRINUSE" ? `${TAG}: 127.0.0.1:${port} is in use` : `${TAG}: the local model cannot listen: ${err.message}`,
        ),
      ),
    );
    server.listen(port, "127.0.0.1", () => resolve());
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

/** What {@link prepare} sets up: a gateway under `wrangler dev --test-scheduled` with its model, and its admin token. */
export type Prepared = GatewayBench<{ server: Server; completions: () => number }> & { adminToken: string };

/**
 * The set-up, apart from the measurement: a copy of the project, the offline model, the D1 schema and
 * `wrangler dev`. bench/run.mjs (--quick) starts it while benches that time nothing run (the bundle size),
 * so that the scheduler's start-up does not add to the wall time.
 */
export async function prepare(_quick: boolean): Promise<Prepared> {
  const adminToken = `admin-${crypto.randomUUID().replaceAll("-", "")}`;
  const gateway = await startGatewayBench({
    tag: TAG,
    devVars: `GATEWAY_ADMIN_TOKEN=${adminToken}\n`,
    startModel,
    extraArgs: ["--test-scheduled"],
  });
  return { ...gateway, adminToken };
}

export async function run(quick: boolean, prepared?: Promise<Prepared>) {
  const due = quick ? 20 : 1000;
  const rounds = 1;
  const warmupDue = 100; // the full run's unrecorded first round

  const gateway = await (prepared ?? prepare(quick));
  const { logFile, adminToken, model } = gateway;
  const started = gateway.dev;
  const dev = started.child;
  const completions = model.completions;
  let ok = false;
  try {
    const base = started.base;

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

    const clockTicks = readClockTicks();
    const group = dev.pid as number;

    /** One tick through `/__scheduled`: client wall time, its log line, and workerd's CPU over it. */
    let ticks = 0;
    async function tick(): Promise<{ ms: number; line: TickLine; cpuMs: number | null }> {
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
      if (line.claimed !== line.dispatched || line.skipped + line.failed + line.deferred !== 0)
        throw new Error(`${TAG}: a tick did not dispatch every firing it claimed: ${JSON.stringify(line)}`);
      return { ms, line, cpuMs: cpu0 === null || cpu1 === null ? null : cpu1 - cpu0 };
    }

    /** Runs of the index in `status` (newest first, at most 200). */
    const runsIn = async (status: string) =>
      (await admin<{ runs: RunRow[] }>("GET", `/api/admin/runs?status=${status}&limit=200`, 200)).runs;

    let createMsPerJob = CREATE_MS_GUESS; // expected time to create one job, from the last round
    const dueTicks: number[] = [];
    const dueWorker: number[] = [];
    const ticksPerRound: number[] = [];
    const drainAll: number[] = [];
    const perFiring: number[] = [];
    const cpuPerFiring: number[] = [];
    const idle: number[] = [];
    const idleWorker: number[] = [];
    const runsDrained: number[] = [];
    const health: number[] = [];
    const createPerJob: number[] = [];
    let modelCalls = 0;
    let expectedCalls = 0;
    let idleAfter = false;

    for (let r = quick ? 1 : 0; r <= rounds; r++) {
      const record = r > 0; // round 0 (full run only) warms up isolates, SQLite and DO code
      for (let i = 0; i < HEALTHZ_PER_ROUND; i++) {
        const ms = await healthz();
        if (record) health.push(ms);
      }

      // N one-shots for one instant ahead, none due yet.
      const n = record ? due : warmupDue;
      const ids = Array.from({ length: n }, (_, i) => `once-r${String(r).padStart(2, "0")}-${String(i).padStart(4, "0")}`);
      // A busy machine can make creation outlast the lead: the jobs still to create then get a later
      // instant (the API refuses one-shots in the past), and this round goes without an idle tick.
      const minLead = quick ? QUICK_MIN_LEAD_MS : MIN_LEAD_MS;
      const lead = Math.max(minLead, Math.ceil(1.1 * createMsPerJob * n) + BASELINE_MARGIN_MS);
      // A job created this close to the instant gets a later one (the API refuses one-shots in the past).
      const lateMargin = Math.min(2500, lead / 2);
      let at = Date.now() + lead;
      const firstAt = at;
      const c0 = performance.now();
      await pool(ids, API_CONCURRENCY, async (id) => {
        if (Date.now() > at - lateMargin) at = Date.now() + minLead;
        await createJob(id, new Date(at).toISOString());
      });
      const createMs = performance.now() - c0;
      createMsPerJob = createMs / n;
      if (record) createPerJob.push(createMs / n);

      // Baseline: the same N jobs, none due. No tick runs unless this bench asks, so a slow creation
      // only costs this round's baseline sample, never the measured ticks.
      let idleMs: number | undefined;
      if (Date.now() <= firstAt - BASELINE_MARGIN_MS) {
        const b = await tick();
        if (b.line.due !== 0) throw new Error(`${TAG}: the idle tick found ${b.line.due} due jobs`);
        idleMs = b.ms;
        if (record) {
          idle.push(b.ms);
          idleWorker.push(b.line.duration_ms);
        }
      } else {
        console.error(`${TAG}: round ${r}: creating ${n} jobs took ${Math.round(createMs)} ms (${lead} ms lead); no idle tick this round`);
      }

      // The measured ticks: all N due; back to back until every one is dispatched.
      await sleep(Math.max(0, at - Date.now() + 50));
      const callsBefore = completions();
      let dispatched = 0;
      let roundTicks = 0;
      let roundTickMs = 0;
      let roundCpu: number | null = 0;
      const d0 = performance.now();
      while (dispatched < n) {
        const t = await tick();
        if (t.line.dispatched === 0) throw new Error(`${TAG}: round ${r}: a tick dispatched nothing with ${n - dispatched} jobs left`);
        dispatched += t.line.dispatched;
        roundTicks++;
        roundTickMs += t.ms;
        roundCpu = roundCpu === null || t.cpuMs === null ? null : roundCpu + t.cpuMs;
        if (record) {
          dueTicks.push(t.ms);
          dueWorker.push(t.line.duration_ms);
        }
      }
      const returned = performance.now();
      if (dispatched !== n) throw new Error(`${TAG}: round ${r}: ${dispatched} firings dispatched for ${n} due jobs`);
      if (record) {
        ticksPerRound.push(roundTicks);
        drainAll.push(returned - d0);
        if (idleMs !== undefined) perFiring.push((roundTickMs - idleMs * roundTicks) / n);
        if (roundCpu !== null) cpuPerFiring.push(roundCpu / n);
      }

      // Every job has its one firing, dispatched with a run id.
      await pool(ids, API_CONCURRENCY, async (id) => {
        const { firings } = await admin<{ firings: FiringRow[] }>("GET", `/api/admin/jobs/${id}/firings`, 200);
        const f = firings[0];
        if (firings.length !== 1 || f?.status !== "dispatched" || !f.run_id)
          throw new Error(`${TAG}: after the ticks, job ${id}'s firings are ${JSON.stringify(firings)}`);
      });

      // Quiet before the next round: the N runs answered by the model, nothing queued or running.
      for (const deadline = performance.now() + 300_000; ; ) {
        const [queued, running] = await Promise.all([runsIn("queued"), runsIn("running")]);
        if (queued.length === 0 && running.length === 0 && completions() - callsBefore >= n) break;
        if (performance.now() > deadline)
          throw new Error(
            `${TAG}: round ${r}: after 300 s, ${completions() - callsBefore}/${n} model calls, ${queued.length} queued, ${running.length} running`,
          );
        await sleep(100);
      }
      if (record) runsDrained.push(performance.now() - returned);
      modelCalls += completions() - callsBefore;

      await pool(ids, API_CONCURRENCY, async (id) => void (await admin("DELETE", `/api/admin/jobs/${id}`, 200)));
      expectedCalls += n;
      // No idle tick fitted before the jobs fell due (a busy machine): take it now, on the emptied table.
      if (record && idleMs === undefined) {
        const b = await tick();
        if (b.line.due !== 0) throw new Error(`${TAG}: the idle tick found ${b.line.due} due jobs`);
        idle.push(b.ms);
        idleWorker.push(b.line.duration_ms);
        perFiring.push((roundTickMs - b.ms * roundTicks) / n);
        idleAfter = true;
      }
    }

    const notCompleted = (await Promise.all(["failed", "cancelled", "awaiting_approval"].map(runsIn))).flat();
    if (notCompleted.length > 0)
      throw new Error(`${TAG}: runs that did not complete: ${JSON.stringify(notCompleted.slice(0, 5))} (${notCompleted.length})`);
    // One completion per run; more only when a run retried its model call (a saturated machine), never fewer.
    if (modelCalls < expectedCalls)
      throw new Error(`${TAG}: the offline model answered ${modelCalls} chat completions for ${expectedCalls} runs`);

    // Warnings and errors the gateway logged (JSON lines) or wrangler printed, over the whole run.
    const problems = readFileSync(logFile, "utf8")
      .split("\n")
      .filter((line) => /"level":"(warn|error)"|\[ERROR\]|\[WARNING\]|✘/.test(line));
    for (const line of problems.slice(0, 5)) console.error(`${TAG}: wrangler log: ${line.slice(0, 300)}`);

    if (idle.length === 0) throw new Error(`${TAG}: no round left time for a baseline tick (the machine is too busy)`);
    const result = {
      due_jobs: due,
      rounds,
      ticks_to_dispatch_all: median(ticksPerRound),
      tick_ms_median: round(median(dueTicks)),
      tick_ms_p90: round(quantile(dueTicks, 0.9)),
      tick_worker_ms_median: round(median(dueWorker)),
      idle_tick_ms_median: round(median(idle)),
      idle_tick_worker_ms_median: round(median(idleWorker)),
      idle_tick_on: idleAfter ? "the emptied table (creation outlasted the lead)" : `the same ${due} jobs, none due yet`,
      ms_per_firing: round(median(perFiring), 2),
      workerd_cpu_ms_per_firing: cpuPerFiring.length > 0 ? round(median(cpuPerFiring), 2) : null,
      drain_all_due_ms: round(median(drainAll)),
      runs_drained_after_ticks_ms: round(median(runsDrained)),
      create_ms_per_job: round(median(createPerJob), 1),
      healthz_median_ms: round(median(health)),
      model_calls_beyond_one_per_run: modelCalls - expectedCalls,
      wrangler_log_warnings_errors: problems.length,
    };
    ok = true;
    return result;
  } finally {
    await gateway.dispose(ok);
  }
}

/**
 * Helpers the end-to-end benches share: the project root, free ports, the
 * sample statistics every bench reports, workerd's CPU time from /proc, and
 * stopping a detached `wrangler dev` with everything in its process group.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import {
  closeSync,
  cpSync,
  existsSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer as createNetServer } from "node:net";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";

/** The development config the benches run the gateway with (its model is the offline one on 127.0.0.1:8790). */
export const DEV_CONFIG = "config/gateway.dev.json5";
/** The port config/gateway.dev.json5 points the `local` provider at. */
export const MODEL_PORT = 8790;

/** The project root: `npm run bench` runs from it (each bench bundle is imported from a data: URL). */
export function projectRoot(tag: string): string {
  const root = process.cwd();
  if (!existsSync(join(root, "wrangler.toml")) || !existsSync(join(root, DEV_CONFIG)))
    throw new Error(`${tag}: run it from the project root (npm run bench); ${root} has no wrangler.toml`);
  return root;
}

/** A port nobody listens on right now (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createNetServer();
    probe.unref();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Sorted-sample quantile (the same convention as bench/prompts.bench.ts). */
export function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number;
}
export const median = (values: readonly number[]) => quantile(values, 0.5);
export const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;

/**
 * CPU time (ms) used so far by the workerd processes of a process group (Linux /proc; null elsewhere).
 * Processes that exit in between are not counted, so compare it only across a steady phase.
 */
export function workerdCpuMs(group: number, ticksPerS: number): number | null {
  if (!existsSync("/proc/self/stat")) return null;
  let total = 0;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" "); // fields[0] is field 3 (state)
    if (comm !== "workerd" || Number(fields[2]) !== group) continue;
    total += ((Number(fields[11]) + Number(fields[12])) / ticksPerS) * 1000; // utime + stime
  }
  return total;
}

/**
 * Ends a detached child and everything in its process group, and waits for it to exit. Graceful (the
 * default): SIGTERM, then SIGKILL after 5 s — wrangler removes its temporary files (about 1.4 s here). Not
 * graceful: SIGKILL at once, for a server whose whole directory is thrown away next (the benches' copies).
 */
export async function stopChild(child: ChildProcess | undefined, graceful = true): Promise<void> {
  if (!child?.pid || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), sig);
    } catch {
      /* already gone */
    }
  };
  let clean = false;
  if (graceful) {
    signal("SIGTERM");
    clean = await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]);
  }
  signal("SIGKILL"); // stragglers in the group (workerd) that outlived wrangler, or wrangler itself
  if (!clean) await Promise.race([exited, sleep(2000)]);
}

/** Rebuilds src/generated from the shipped config (wrangler's build step wrote the development one). */
export function restoreGenerated(root: string, env: NodeJS.ProcessEnv, tag: string): void {
  const rebuilt = spawnSync(process.execPath, [join(root, "scripts", "build.mjs")], { cwd: root, env, encoding: "utf8" });
  if (rebuilt.status !== 0) console.error(`${tag}: restoring src/generated failed:\n${rebuilt.stdout}${rebuilt.stderr}`);
}

/**
 * Creates the D1 schema under `persist`: every file of migrations/, in order, as ONE `wrangler d1 execute --file`
 * (about 4 s here, where `wrangler d1 migrations apply` takes about 15 s: it starts a local runtime per
 * migration). The bench database needs the schema, not wrangler's d1_migrations bookkeeping.
 */
export async function applyD1Migrations(root: string, env: NodeJS.ProcessEnv, persist: string, tag: string): Promise<void> {
  const wrangler = join(root, "node_modules", ".bin", "wrangler");
  const dir = join(root, "migrations");
  const files = readdirSync(dir)
    .filter((f) => /^\d{4}_.+\.sql$/.test(f))
    .sort();
  if (files.length === 0) throw new Error(`${tag}: no migrations in ${dir}`);
  const all = join(persist, "..", "migrations.sql");
  writeFileSync(all, files.map((f) => `-- ${f}\n${readFileSync(join(dir, f), "utf8")}\n`).join("\n"));
  // Asynchronous, so that run.mjs can run another bench meanwhile (bench/run.mjs, --quick).
  const child = spawn(wrangler, ["d1", "execute", "DB", "--local", "--persist-to", persist, "--file", all, "--yes"], {
    cwd: root,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (output += d.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
  const code = await new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c)));
  clearTimeout(timer);
  if (code !== 0) throw new Error(`${tag}: D1 migrations failed (exit ${code}):\n${output}`);
}

/** A `wrangler dev` started by {@link startWranglerDev}: its base URL, ports and log file. */
export interface WranglerDev {
  child: ChildProcess;
  base: string;
  port: number;
  inspectorPort: number;
  logFile: string;
}

/**
 * Starts `wrangler dev` in its own process group on a free port (and a free `--inspector-port`, so that
 * two benches or a developer's `npm start` never collide on 9229), with its output in `logFile`, and
 * waits until `GET healthPath` answers 200 (90 s at most). `cwd` holds the wrangler.toml. On failure the
 * process group is ended and the error carries the log. Stop it with {@link stopChild}.
 */
export async function startWranglerDev(o: {
  tag: string;
  root: string;
  cwd: string;
  args: readonly string[];
  env: NodeJS.ProcessEnv;
  logFile: string;
  healthPath?: string;
  /** Whether an answer to `GET healthPath` means "up" (status 200 by default). */
  ready?: (status: number) => boolean;
}): Promise<WranglerDev> {
  const wrangler = join(o.root, "node_modules", ".bin", "wrangler");
  const port = await freePort();
  const inspectorPort = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const logFd = openSync(o.logFile, "w");
  const child = spawn(
    wrangler,
    [
      "dev",
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--inspector-port",
      String(inspectorPort),
      "--show-interactive-dev-session=false",
      ...o.args,
    ],
    // Its own process group, so that stopChild() ends workerd with it.
    { cwd: o.cwd, env: { WRANGLER_SEND_METRICS: "false", ...o.env }, stdio: ["ignore", logFd, logFd], detached: true },
  );
  closeSync(logFd); // the child holds its own copy
  const started = performance.now();
  try {
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(`${o.tag}: wrangler dev exited early:\n${readFileSync(o.logFile, "utf8")}`);
      if (performance.now() - started > 90_000)
        throw new Error(`${o.tag}: no GET ${o.healthPath ?? "/healthz"} answer within 90 s:\n${readFileSync(o.logFile, "utf8")}`);
      const res = await fetch(`${base}${o.healthPath ?? "/healthz"}`).catch(() => null);
      await res?.arrayBuffer();
      if (res && (o.ready ?? ((s) => s === 200))(res.status)) break;
      await sleep(200);
    }
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  return { child, base, port, inspectorPort, logFile: o.logFile };
}

/** The latency summary every end-to-end figure uses (ms, nearest-rank quantiles). */
export function latencySummary(ms: readonly number[]): { n: number; p50_ms: number; p95_ms: number; p99_ms: number; mean_ms: number } {
  return {
    n: ms.length,
    p50_ms: round(quantile(ms, 0.5), 2),
    p95_ms: round(quantile(ms, 0.95), 2),
    p99_ms: round(quantile(ms, 0.99), 2),
    mean_ms: round(ms.reduce((a, b) => a + b, 0) / Math.max(1, ms.length), 2),
  };
}

/** Clock ticks per second of /proc/<pid>/stat times. */
export function clockTicks(): number {
  return Number(spawnSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).stdout?.trim()) || 100;
}

/**
 * Closed-loop throughput: `concurrency` clients, each calling `once(client, i)` back to back for `seconds`.
 * Operations completed inside the window count; those still in flight at the deadline are awaited (so
 * nothing leaks into the next phase) but not counted (the peer benchmark's convention). Also returns the
 * client latencies of the counted operations and workerd's CPU per operation (Linux /proc; CPU is read
 * once every started operation has finished, so it is divided by all of them).
 */
export async function closedLoop(o: {
  concurrency: number;
  seconds: number;
  group: number;
  once: (client: number, i: number) => Promise<unknown>;
}): Promise<{ per_s: number; completed: number; seconds: number; latency: number[]; workerd_cpu_ms_per_op: number | null }> {
  const ticks = clockTicks();
  const cpu0 = workerdCpuMs(o.group, ticks);
  const t0 = performance.now();
  const deadline = t0 + o.seconds * 1000;
  const latency: number[] = [];
  let started = 0;
  await Promise.all(
    Array.from({ length: o.concurrency }, async (_, client) => {
      for (let i = 0; performance.now() < deadline; i++) {
        started++;
        const s = performance.now();
        await o.once(client, i);
        const e = performance.now();
        if (e <= deadline) latency.push(e - s);
      }
    }),
  );
  const cpu1 = workerdCpuMs(o.group, ticks);
  const elapsed = (deadline - t0) / 1000;
  return {
    per_s: round(latency.length / elapsed, 1),
    completed: latency.length,
    seconds: round(elapsed, 2),
    latency,
    workerd_cpu_ms_per_op: cpu0 === null || cpu1 === null ? null : round((cpu1 - cpu0) / started, 2),
  };
}

/** workerd's CPU (ms) per call of `fn` over `n` sequential calls, with the client latency of each. */
export async function sequential(
  n: number,
  group: number,
  fn: (i: number) => Promise<unknown>,
): Promise<{ latency: number[]; workerd_cpu_ms_per_op: number | null }> {
  const ticks = clockTicks();
  const cpu0 = workerdCpuMs(group, ticks);
  const latency: number[] = [];
  for (let i = 0; i < n; i++) {
    const s = performance.now();
    await fn(i);
    latency.push(performance.now() - s);
  }
  const cpu1 = workerdCpuMs(group, ticks);
  return { latency, workerd_cpu_ms_per_op: cpu0 === null || cpu1 === null ? null : round((cpu1 - cpu0) / n, 2) };
}

/** What {@link snapshotProject} leaves out: dependencies (linked instead), history, local state, outputs. */
const SNAPSHOT_SKIP = new Set([".git", ".wrangler", "node_modules", "dist", "test-results", "test", "docs", join("bench", "results")]);

/**
 * Copies the project (sources, config, prompts, migrations, scripts) to `dest` with node_modules linked,
 * and returns `dest`. The end-to-end benches run wrangler from such a copy: its build step rewrites
 * src/generated/ and `wrangler dev` reloads when anything under src/ changes, so in a shared working tree
 * (another build, test run or editor) a run could otherwise switch config or code halfway through. The
 * figures are those of the tree as it was when the bench started.
 */
export function snapshotProject(root: string, dest: string, modulesFrom = root): string {
  cpSync(root, dest, {
    recursive: true,
    filter: (src) => !SNAPSHOT_SKIP.has(relative(root, src)),
  });
  symlinkSync(join(modulesFrom, "node_modules"), join(dest, "node_modules"), "dir");
  return dest;
}

/** Points the development config of a project copy at the offline model on `port` (it names MODEL_PORT). */
function pointModelAt(work: string, port: number): void {
  const file = join(work, DEV_CONFIG);
  const text = readFileSync(file, "utf8");
  const from = `"http://127.0.0.1:${MODEL_PORT}/v1"`;
  if (!text.includes(from)) throw new Error(`${DEV_CONFIG} no longer names ${from}: the benches cannot move the model`);
  writeFileSync(file, text.replaceAll(from, `"http://127.0.0.1:${port}/v1"`));
}

/** A gateway under `wrangler dev` for an end-to-end bench, from {@link startGatewayBench}. */
export interface GatewayBench<M extends { server: import("node:http").Server }> {
  tmp: string;
  logFile: string;
  model: M;
  dev: WranglerDev;
  /**
   * Ends wrangler (killed: its directory goes next), closes the model, and removes the temporary directory —
   * kept, with a message, after a failure (`ok` false) or with SOPHIE_BENCH_KEEP=1.
   */
  dispose(ok: boolean): Promise<void>;
}

/**
 * The set-up every gateway bench shares: a temporary directory with a copy of the project
 * ({@link snapshotProject}), `dev.vars` with `devVars` (secrets: tokens), the bench's model server
 * (`startModel(copy, port)`, on a free port that the copy's development config is pointed at — so two gateway
 * benches can be set up side by side), the D1 schema, and `wrangler dev` with that config and `extraArgs`. Ctrl-C while it exists ends wrangler's process group and removes the
 * directory. On failure everything started is ended and the log kept.
 */
export async function startGatewayBench<M extends { server: import("node:http").Server }>(o: {
  tag: string;
  devVars: string;
  startModel: (work: string, port: number) => Promise<M>;
  extraArgs?: readonly string[];
  /** Another copy of the project to run (node_modules stay this project's); the project itself by default. */
  source?: string;
}): Promise<GatewayBench<M>> {
  const root = projectRoot(o.tag);
  const tmp = mkdtempSync(join(tmpdir(), `sophie-${o.tag.replaceAll(" ", "-")}-`));
  const persist = join(tmp, "state");
  const devVarsFile = join(tmp, "dev.vars");
  const logFile = join(tmp, "wrangler.log");
  writeFileSync(devVarsFile, o.devVars);
  const { SOPHIE_CONFIG: _drop, ...baseEnv } = process.env;
  const env = { ...baseEnv, SOPHIE_CONFIG: DEV_CONFIG, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };

  let model: M | undefined;
  let child: ChildProcess | undefined;
  // Ctrl-C mid-run: no finally block would run, so end wrangler's process group here.
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
  const closeModel = async () => {
    if (!model) return;
    const server = model.server;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  try {
    const work = snapshotProject(o.source ?? root, join(tmp, "tree"), root);
    const port = await freePort();
    pointModelAt(work, port);
    model = await o.startModel(work, port);
    await applyD1Migrations(work, env, persist, o.tag);
    const dev = await startWranglerDev({
      tag: o.tag,
      root,
      cwd: work,
      args: ["--env-file", devVarsFile, "--persist-to", persist, ...(o.extraArgs ?? [])],
      env,
      logFile,
    });
    child = dev.child;
    const started = model;
    return {
      tmp,
      logFile,
      model: started,
      dev,
      async dispose(ok) {
        await stopChild(child, false);
        await closeModel();
        process.off("SIGINT", interrupted);
        process.off("SIGTERM", interrupted);
        if (ok && !process.env.SOPHIE_BENCH_KEEP) rmSync(tmp, { recursive: true, force: true });
        else console.error(`${o.tag}: wrangler's output kept in ${logFile}`);
      },
    };
  } catch (err) {
    await closeModel();
    process.off("SIGINT", interrupted);
    process.off("SIGTERM", interrupted);
    console.error(`${o.tag}: wrangler's output kept in ${logFile}`);
    throw err;
  }
}

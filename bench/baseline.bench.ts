/**
 * The baseline every end-to-end figure is divided by (docs/benchmarks.md):
 * bench/baseline/, a tiny separate Worker under the same `wrangler dev`
 * conditions as the gateway (local workerd, a fresh --persist-to directory,
 * free ports), where each request does exactly one Durable Object SQLite write
 * and one R2 put and answers JSON — what any gateway route that records
 * anything must do. Measured here: requests/s with 8 concurrent clients (each
 * on its own Durable Object, like 8 conversations), sequential p50/p95/p99,
 * and workerd's CPU per request. bench/run.mjs turns the other figures into
 * ratios to these.
 *
 * Then the unit costs (`POST /cost/{op}`, sequential): workerd CPU and client
 * median of a request that does only one R2 put, one DO SQLite insert, one
 * DO RPC, one alarm write, one D1 upsert, one console line, or nothing, and each one's
 * margin over the empty request — the prices a turn's operations are counted
 * in (docs/benchmarks.md, "Where the time goes").
 *
 * Then the floor of a turn (`POST /turn`, docs/benchmarks.md "The floor"): 8 long-lived conversations of plain
 * turns, then of turns with one tool round, against the offline model (scripts/local-model.mjs, served from this
 * process as the turn bench serves it): turns/s, sequential median and workerd CPU per turn — what no gateway turn
 * can undercut under this `wrangler dev`, beside the peer measured in the same run.
 */
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import type { Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import {
  closedLoop,
  freePort,
  latencySummary,
  projectRoot,
  sequential,
  startWranglerDev,
  stopChild,
  type WranglerDev,
} from "./support/devserver";

const TAG = "baseline bench";

/** bench/baseline copied into `tmp` (wrangler writes .wrangler/ beside its wrangler.toml; the copy goes with tmp). */
function baselineCopy(root: string, tmp: string): string {
  const dest = join(tmp, "baseline");
  cpSync(join(root, "bench", "baseline"), dest, { recursive: true, filter: (src) => !src.includes(".wrangler") });
  return dest;
}
export const CONCURRENCY = 8;

/**
 * `settle`: set-ups other benches started beside this one (bench/run.mjs, --quick), awaited once this
 * bench's own server is up and before anything is measured, so that the reference figures are taken with
 * nothing but idle servers beside them.
 */
export async function run(quick: boolean, _prepared?: unknown, settle?: () => Promise<unknown>) {
  const root = projectRoot(TAG);
  const seqN = quick ? 30 : 500;
  const seconds = quick ? 2 : 15;
  const tmp = mkdtempSync(join(tmpdir(), "sophie-baseline-bench-"));
  let dev: WranglerDev | undefined;
  let model: Server | undefined;
  let ok = false;
  try {
    const modelPort = await freePort();
    model = await startModel(root, modelPort);
    dev = await startWranglerDev({
      tag: TAG,
      root,
      cwd: baselineCopy(root, tmp),
      args: ["--persist-to", join(tmp, "state"), "--var", `MODEL_URL:http://127.0.0.1:${modelPort}`],
      env: process.env,
      logFile: join(tmp, "wrangler.log"),
    });
    const base = dev.base;
    const body = JSON.stringify({ role: "user", content: "hello", ts: "2026-11-26T00:00:00Z" });
    const write = async (conversation: string) => {
      const res = await fetch(`${base}/write?c=${conversation}`, { method: "POST", headers: { "content-type": "application/json" }, body });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`${TAG}: POST /write answered ${res.status}: ${text}`);
    };
    const group = dev.child.pid as number;
    await settle?.();
    for (let i = 0; i < (quick ? 18 : 90); i++) await write(`c${i % 9}`); // warm-up: isolates, the 9 objects, SQLite, R2
    const seq = await sequential(seqN, group, () => write("c8"));
    const conc = await closedLoop({ concurrency: CONCURRENCY, seconds, group, once: (c) => write(`c${c}`) });
    // Unit costs: each operation alone, sequentially, on one object (warm), less the empty request.
    const costs: Record<string, { p50_ms: number; workerd_cpu_ms: number | null; margin_cpu_ms?: number | null }> = {};
    for (const op of ["none", "rpc", "sql", "alarm", "r2", "d1", "log"]) {
      const once = async () => {
        const res = await fetch(`${base}/cost/${op}?c=cost`, { method: "POST", headers: { "content-type": "application/json" }, body });
        const text = await res.text();
        if (res.status !== 200) throw new Error(`${TAG}: POST /cost/${op} answered ${res.status}: ${text}`);
      };
      for (let i = 0; i < (quick ? 3 : 10); i++) await once();
      const r = await sequential(quick ? 15 : 300, group, once);
      costs[op] = { p50_ms: latencySummary(r.latency).p50_ms, workerd_cpu_ms: r.workerd_cpu_ms_per_op };
    }
    const none = costs.none?.workerd_cpu_ms ?? null;
    for (const c of Object.values(costs))
      c.margin_cpu_ms = none === null || c.workerd_cpu_ms === null ? null : Math.round((c.workerd_cpu_ms - none) * 100) / 100;
    const floor = await floorTurns(base, group, quick);
    ok = true;
    return {
      what: "1 DO SQLite insert + 1 R2 put + JSON answer per request (bench/baseline/)",
      requests_per_s_8_concurrent: conc.per_s,
      concurrent: { ...latencySummary(conc.latency), seconds: conc.seconds, workerd_cpu_ms_per_request: conc.workerd_cpu_ms_per_op },
      sequential: { ...latencySummary(seq.latency), workerd_cpu_ms_per_request: seq.workerd_cpu_ms_per_op },
      unit_costs: costs,
      floor,
    };
  } finally {
    await stopChild(dev?.child, false); // it runs from a copy in tmp, which goes next
    model?.close();
    if (ok && !process.env.SOPHIE_BENCH_KEEP) rmSync(tmp, { recursive: true, force: true });
    else console.error(`${TAG}: wrangler's output kept in ${tmp}`);
  }
}

/** The offline model (scripts/local-model.mjs) on `port`, as the turn bench serves it. */
async function startModel(root: string, port: number): Promise<Server> {
  const { createLocalModelServer } = (await import(pathToFileURL(join(root, "scripts", "local-model.mjs")).href)) as {
    createLocalModelServer: () => Server;
  };
  const server = createLocalModelServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
  return server;
}

/**
 * The floor of a turn (`POST /turn`), plain and with one tool round: 8 conversations closed-loop and one
 * sequentially, each turn checked (the model calls it made: 1, or 2 with the tool round).
 */
async function floorTurns(base: string, group: number, quick: boolean) {
  const seconds = quick ? 2 : 15;
  const kinds = [
    { name: "plain", message: "hello", calls: 1 },
    { name: "tool_round", message: "list files", calls: 2 },
  ] as const;
  const out: Record<string, unknown> = {};
  for (const k of kinds) {
    const turn = async (conversation: string) => {
      const res = await fetch(`${base}/turn?c=${k.name}-${conversation}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ message: k.message }),
      });
      const body = (await res.json()) as { model_calls?: number; error?: string };
      if (res.status !== 200 || body.model_calls !== k.calls)
        throw new Error(
          `${TAG}: POST /turn (${k.name}) answered ${res.status} with ${JSON.stringify(body)}, expected ${k.calls} model calls`,
        );
    };
    for (let i = 0; i < (quick ? 18 : 90); i++) await turn(`c${i % 9}`); // warm-up: the 9 conversations
    const seq = await sequential(quick ? 20 : 200, group, () => turn("c8"));
    const conc = await closedLoop({ concurrency: CONCURRENCY, seconds, group, once: (c) => turn(`c${c}`) });
    out[k.name] = {
      turns_per_s_8_concurrent: conc.per_s,
      concurrent: { ...latencySummary(conc.latency), workerd_cpu_ms_per_turn: conc.workerd_cpu_ms_per_op },
      sequential: { ...latencySummary(seq.latency), workerd_cpu_ms_per_turn: seq.workerd_cpu_ms_per_op },
    };
  }
  return {
    what: "the floor of a turn (bench/baseline POST /turn): 1 RPC, the message and each reply stored in the conversation's object, the offline model called with the last 20 messages (2 calls and an echo tool for a tool round), 1 console line, 1 R2 put",
    ...out,
  };
}

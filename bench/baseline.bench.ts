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
 */
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { closedLoop, latencySummary, projectRoot, sequential, startWranglerDev, stopChild, type WranglerDev } from "./support/devserver";

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
  let ok = false;
  try {
    dev = await startWranglerDev({
      tag: TAG,
      root,
      cwd: baselineCopy(root, tmp),
      args: ["--persist-to", join(tmp, "state")],
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
    ok = true;
    return {
      what: "1 DO SQLite insert + 1 R2 put + JSON answer per request (bench/baseline/)",
      requests_per_s_8_concurrent: conc.per_s,
      concurrent: { ...latencySummary(conc.latency), seconds: conc.seconds, workerd_cpu_ms_per_request: conc.workerd_cpu_ms_per_op },
      sequential: { ...latencySummary(seq.latency), workerd_cpu_ms_per_request: seq.workerd_cpu_ms_per_op },
      unit_costs: costs,
    };
  } finally {
    await stopChild(dev?.child, false); // it runs from a copy in tmp, which goes next
    if (ok && !process.env.SOPHIE_BENCH_KEEP) rmSync(tmp, { recursive: true, force: true });
    else console.error(`${TAG}: wrangler's output kept in ${tmp}`);
  }
}

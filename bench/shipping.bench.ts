/**
 * Shipping lag (issue 23): how long after a turn's reply its D1 index row (final: `completed`) and its R2 audit
 * events (`run.completed` in a segment) exist. 8 conversations send plain turns through `/v1/chat/completions`
 * back to back for a fixed window (as the turn bench's conversations do); one poller, every POLL_MS, reads the
 * D1 run index (`GET /api/admin/runs?status=completed`), another the day's audit log (`GET /api/admin/audit`),
 * each at most every POLL_MS. A run first seen in an answer appeared after the previous read began and before
 * that answer arrived: the lag (from the reply) is reported by both bounds, `by` (upper) and `after` (lower); they
 * are one read plus POLL_MS apart (`read_ms_median`: the audit read grows with the day's segments, and is slow on
 * a busy machine). The pollers' reads load the gateway a little.
 */

import { join } from "node:path";
import { latencySummary, median, round, sleep } from "./support/devserver";
import { openLocalState } from "./support/local-state";
import { type Prepared, prepare } from "./turn.bench";

const TAG = "shipping bench";
const CONCURRENCY = 8;
const POLL_MS = 100;
/** Reading wrangler dev's files costs the gateway nothing: poll them often, for tight bounds. */
const LOCAL_POLL_MS = 25;
/** How long after the last reply the poller waits for the stragglers before calling them lost. */
const DRAIN_MS = 60_000;

/** When a store was first seen holding the run: after `after` (the previous read began), by `by` (this read's answer). */
interface Seen {
  after: number;
  by: number;
}
interface Turn {
  repliedAt: number; // performance.now()
  d1?: Seen;
  r2?: Seen;
}

export async function run(quick: boolean, prepared?: Promise<Prepared>) {
  const seconds = quick ? 2 : 15;
  const gateway = await (prepared ?? prepare(quick));
  const { dev, apiToken, adminToken } = gateway;
  const base = dev.base;
  const admin = { authorization: `Bearer ${adminToken}` };
  const turns = new Map<string, Turn>();
  let ok = false;
  try {
    async function turn(conversation: string): Promise<string> {
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiToken}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "agent:main", user: conversation, messages: [{ role: "user", content: "hello" }] }),
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`${TAG}: POST /v1/chat/completions answered ${res.status}: ${text.slice(0, 300)}`);
      const runId = res.headers.get("x-run-id");
      if (!runId) throw new Error(`${TAG}: no X-Run-Id on the answer`);
      return runId;
    }
    // Each conversation's object exists and is warm; its first turn (a new session) is not measured.
    await Promise.all(Array.from({ length: CONCURRENCY }, (_, c) => turn(`ship-${c}`)));

    const today = () => new Date().toISOString().slice(0, 10);
    const auditPrefix = `agents/main/audit/${today()}/`;
    const runsCompletedIn = (jsonl: string) =>
      jsonl
        .split("\n")
        .filter((line) => line.includes('"run.completed"'))
        .map((line) => (JSON.parse(line) as { run_id: string }).run_id);
    // Preferred: wrangler dev's own files (fast reads, and R2's exact upload time); else the admin API.
    const local = openLocalState(join(gateway.tmp, "state"));
    /** Run ids the D1 index holds as completed. */
    const readD1 = local
      ? async () => local.completedRuns()
      : async () =>
          (
            (await (await fetch(`${base}/api/admin/runs?status=completed&limit=100`, { headers: admin })).json()) as {
              runs?: { run_id: string }[];
            }
          ).runs?.map((r) => r.run_id) ?? [];
    /** Run ids with a `run.completed` audit event in R2 (with the segment's upload time, read locally). */
    const epochToPerf = Date.now() - performance.now();
    const readR2 = local
      ? async () =>
          local.newObjects(auditPrefix).flatMap((o) => runsCompletedIn(o.body).map((id) => ({ id, at: o.uploaded - epochToPerf })))
      : async () =>
          runsCompletedIn(await (await fetch(`${base}/api/admin/audit?agent_id=main&date=${today()}`, { headers: admin })).text());
    const pending = () => [...turns.values()].filter((t) => !t.d1 || !t.r2).length;

    let sending = true;
    let drainDeadline = Number.POSITIVE_INFINITY;
    const pollMs: Record<"d1" | "r2", number[]> = { d1: [], r2: [] };
    /** Runs whose segment a local R2 read returned (once) before their reply had arrived. */
    const early = new Map<string, number>();
    /**
     * One poller per store, each on its own clock, so a slow read of one store does not delay the other's stamps.
     * A run first seen in an answer appeared after the previous read began and before this answer arrived: both
     * bounds are kept.
     */
    const poller = (store: "d1" | "r2", read: () => Promise<(string | { id: string; at: number })[]>) =>
      (async () => {
        let previous = performance.now();
        for (;;) {
          const t0 = performance.now();
          const ids = await read();
          const seen = performance.now();
          pollMs[store].push(seen - t0);
          for (const x of ids) {
            if (typeof x !== "string" && !turns.has(x.id)) early.set(x.id, x.at); // shipped before its reply arrived
            const t = turns.get(typeof x === "string" ? x : x.id);
            // A local R2 read knows when the segment was put: both bounds are that time.
            if (t && !t[store]) t[store] = typeof x === "string" ? { after: previous, by: seen } : { after: x.at, by: x.at };
          }
          previous = t0;
          if (!sending && (pending() === 0 || seen > drainDeadline)) return;
          await sleep(Math.max(0, (local ? LOCAL_POLL_MS : POLL_MS) - (performance.now() - t0)));
        }
      })();
    const pollers = Promise.all([poller("d1", readD1), poller("r2", readR2)]);
    const deadline = performance.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async (_, c) => {
        while (performance.now() < deadline) {
          const runId = await turn(`ship-${c}`);
          const at = early.get(runId);
          turns.set(runId, { repliedAt: performance.now(), ...(at === undefined ? {} : { r2: { after: at, by: at } }) });
        }
      }),
    );
    drainDeadline = performance.now() + DRAIN_MS;
    sending = false;
    await pollers;

    /** Lags (ms after the reply) by one bound; a store seen before the reply counts as 0. */
    const lags = (bound: keyof Seen, ...stores: ("d1" | "r2")[]) =>
      [...turns.values()]
        .filter((t) => stores.every((st) => t[st]))
        .map((t) => Math.max(0, ...stores.map((st) => (t[st] as Seen)[bound] - t.repliedAt)));
    const summary = (xs: number[]) => (xs.length ? { ...latencySummary(xs), max_ms: round(Math.max(...xs)) } : null);
    const bounds = (...stores: ("d1" | "r2")[]) => ({ by: summary(lags("by", ...stores)), after: summary(lags("after", ...stores)) });
    ok = true;
    return {
      endpoint: "POST /v1/chat/completions (user = conversation), 8 conversations",
      read_from: local
        ? "wrangler dev's state files (D1 runs table; R2 audit segments with their upload time)"
        : "/api/admin/runs and /api/admin/audit",
      poll_ms: local ? LOCAL_POLL_MS : POLL_MS,
      read_ms_median: { d1: round(median(pollMs.d1)), r2: round(median(pollMs.r2)) },
      turns: turns.size,
      not_shipped_after_drain: pending(),
      // `by`: the answer that first held it had arrived (upper bound); `after`: the read before it had begun (lower).
      d1_index_lag: bounds("d1"),
      r2_audit_lag: bounds("r2"),
      shipping_lag: bounds("d1", "r2"),
    };
  } finally {
    await gateway.dispose(ok);
  }
}

/** The set-up (the turn bench's: a gateway of its own under `wrangler dev`); --quick starts it beside the baseline. */
export { prepare };

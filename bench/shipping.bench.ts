/**
 * Shipping lag (issue 23): how long after a turn's reply its D1 index row (final: `completed`) and its R2 audit
 * events (`run.completed` in a segment) exist. 8 conversations send plain turns through `/v1/chat/completions`
 * back to back for a fixed window (as the turn bench's conversations do); one poller, every POLL_MS, reads the
 * D1 run index (`GET /api/admin/runs?status=completed`), another the day's audit log (`GET /api/admin/audit`),
 * each at most every POLL_MS, and each stamps a run with the time the answer that first holds it arrived.
 * Lag = that time − reply received: an upper bound, by at most one read (`read_ms_median` says how long a read
 * took; the audit read grows with the day's segments). The pollers' reads load the gateway a little.
 */

import { latencySummary, median, round, sleep } from "./support/devserver";
import { type Prepared, prepare } from "./turn.bench";

const TAG = "shipping bench";
const CONCURRENCY = 8;
const POLL_MS = 100;
/** How long after the last reply the poller waits for the stragglers before calling them lost. */
const DRAIN_MS = 60_000;

interface Turn {
  repliedAt: number;
  d1At?: number;
  r2At?: number;
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
    /** Run ids the D1 index holds as completed, and run ids with a `run.completed` audit event in R2. */
    const readD1 = async () =>
      (
        (await (await fetch(`${base}/api/admin/runs?status=completed&limit=100`, { headers: admin })).json()) as {
          runs?: { run_id: string }[];
        }
      ).runs?.map((r) => r.run_id) ?? [];
    const readR2 = async () =>
      (await (await fetch(`${base}/api/admin/audit?agent_id=main&date=${today()}`, { headers: admin })).text())
        .split("\n")
        .filter((line) => line.includes('"run.completed"'))
        .map((line) => (JSON.parse(line) as { run_id: string }).run_id);
    const pending = () => [...turns.values()].filter((t) => t.d1At === undefined || t.r2At === undefined).length;

    let sending = true;
    let drainDeadline = Number.POSITIVE_INFINITY;
    const pollMs: Record<"d1" | "r2", number[]> = { d1: [], r2: [] };
    /**
     * One poller per store, each on its own clock: a run first seen in an answer is stamped with the time that
     * answer arrived (an upper bound: it appeared after the previous read began), so a slow read of one store does
     * not delay the other's stamps.
     */
    const poller = (store: "d1" | "r2", read: () => Promise<string[]>, stamp: (t: Turn, at: number) => void) =>
      (async () => {
        for (;;) {
          const t0 = performance.now();
          const ids = await read();
          const seen = performance.now();
          pollMs[store].push(seen - t0);
          for (const id of ids) {
            const t = turns.get(id);
            if (t) stamp(t, seen);
          }
          if (!sending && (pending() === 0 || seen > drainDeadline)) return;
          await sleep(Math.max(0, POLL_MS - (performance.now() - t0)));
        }
      })();
    const pollers = Promise.all([
      poller("d1", readD1, (t, at) => {
        t.d1At ??= at;
      }),
      poller("r2", readR2, (t, at) => {
        t.r2At ??= at;
      }),
    ]);
    const deadline = performance.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async (_, c) => {
        while (performance.now() < deadline) {
          const runId = await turn(`ship-${c}`);
          turns.set(runId, { repliedAt: performance.now() });
        }
      }),
    );
    drainDeadline = performance.now() + DRAIN_MS;
    sending = false;
    await pollers;

    const lags = (pick: (t: Turn) => number | undefined) =>
      [...turns.values()].map((t) => pick(t)).filter((x): x is number => x !== undefined);
    const d1 = lags((t) => (t.d1At === undefined ? undefined : Math.max(0, t.d1At - t.repliedAt)));
    const r2 = lags((t) => (t.r2At === undefined ? undefined : Math.max(0, t.r2At - t.repliedAt)));
    const both = lags((t) =>
      t.d1At === undefined || t.r2At === undefined ? undefined : Math.max(0, t.d1At - t.repliedAt, t.r2At - t.repliedAt),
    );
    const summary = (xs: number[]) => (xs.length ? { ...latencySummary(xs), max_ms: round(Math.max(...xs)) } : null);
    ok = true;
    return {
      endpoint: "POST /v1/chat/completions (user = conversation), 8 conversations; polled through /api/admin/runs and /api/admin/audit",
      poll_ms: POLL_MS,
      read_ms_median: { d1: round(median(pollMs.d1)), r2: round(median(pollMs.r2)) },
      turns: turns.size,
      not_shipped_after_drain: pending(),
      d1_index_lag: summary(d1),
      r2_audit_lag: summary(r2),
      shipping_lag: summary(both),
    };
  } finally {
    await gateway.dispose(ok);
  }
}

/** The set-up (the turn bench's: a gateway of its own under `wrangler dev`); --quick starts it beside the baseline. */
export { prepare };

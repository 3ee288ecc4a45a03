/**
 * Context build time per turn at 100, 1,000 and 10,000 transcript messages
 * (issue target: the 10,000 case within 1.5× of the 100 case). The transcript
 * lives in SQLite with the SessionDO's own schema (node:sqlite stands in for
 * the Durable Object's SQLite); each turn runs the same bounded query the
 * SessionDO runs (newest rows by the (session_id, seq) index, page by page,
 * only as many as the S3 context cap can use) and then prepareHistory
 * (S3 §6 caps, token budget).
 */
import { DatabaseSync } from "node:sqlite";
import { collectRecentRows, prepareHistory } from "../src/context/history";
import { SESSION_MIGRATIONS } from "../src/sessions/schema";

interface Row {
  seq: number;
  role: "user" | "assistant" | "tool";
  content: string;
  tool_name: string | null;
  tool_call_id: string | null;
}

function transcriptOf(n: number): DatabaseSync {
  const db = new DatabaseSync(":memory:");
  for (const step of SESSION_MIGRATIONS) {
    if (typeof step !== "string") continue; // a step that looks at data first (v16 drops empty memory tables)
    try {
      db.exec(step);
    } catch {
      // A build of SQLite without FTS5: only the memory index is missing, which this bench does not use.
      db.exec(step.replace(/CREATE VIRTUAL TABLE[^;]*;/g, ""));
    }
  }
  const insert = db.prepare("INSERT INTO transcript (session_id, role, content, ts) VALUES ('ses_bench', ?, ?, '2026-11-25T00:00:00Z')");
  db.exec("BEGIN");
  for (let i = 0; i < n; i++)
    insert.run(i % 2 ? "assistant" : "user", `message ${i}: ${"the deploy pipeline failed because the pool ran dry ".repeat(4)}`);
  db.exec("COMMIT");
  return db;
}

/**
 * Median µs per call of each of `fns`, measured interleaved (one call of each per round, in turn), so that a
 * noisy moment on a shared machine (GC, another process) lands on every size alike instead of on one of them.
 */
function interleavedMedians(runs: number, fns: readonly (() => void)[]): number[] {
  for (let i = 0; i < 50; i++) for (const fn of fns) fn();
  const times = fns.map(() => [] as number[]);
  for (let i = 0; i < runs; i++) {
    fns.forEach((fn, k) => {
      const t0 = performance.now();
      fn();
      (times[k] as number[]).push((performance.now() - t0) * 1000);
    });
  }
  return times.map((t) => {
    t.sort((a, b) => a - b);
    return Math.round((t[Math.floor(t.length / 2)] as number) * 10) / 10;
  });
}

export async function run(quick: boolean) {
  const runs = quick ? 100 : 500;
  const result: Record<string, unknown> = {};
  const sizes = [100, 1000, 10000] as const;
  const dbs = sizes.map((n) => transcriptOf(n));
  const turns = dbs.map((db) => {
    // The same page as transcript.ts historyPage() reads (it also reads the stored token estimates).
    const page = db.prepare(
      "SELECT seq, role, content, tool_name, tool_call_id FROM transcript WHERE session_id = 'ses_bench' AND seq > 0 AND seq < ? ORDER BY seq DESC LIMIT ?",
    );
    return () => {
      const rows = collectRecentRows((before, limit) => page.all(before, limit) as unknown as Row[]);
      prepareHistory(rows, { window: { contextWindow: 131072, maxOutputTokens: 4096 }, fixedTokens: 2000 });
    };
  });
  const medians = interleavedMedians(runs, turns);
  sizes.forEach((n, k) => {
    result[`messages_${n}`] = { median_us: medians[k] };
  });
  for (const db of dbs) db.close();
  result.ratio_10000_to_100 = Math.round(((medians[2] as number) / (medians[0] as number)) * 100) / 100;
  result.method = "interleaved: each round times one turn at each size";
  result.target = "≤ 1.5";
  return result;
}

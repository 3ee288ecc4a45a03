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

async function median(runs: number, fn: () => void): Promise<number> {
  for (let i = 0; i < 50; i++) fn();
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    fn();
    times.push((performance.now() - t0) * 1000);
  }
  times.sort((a, b) => a - b);
  return Math.round((times[Math.floor(times.length / 2)] as number) * 10) / 10;
}

export async function run(quick: boolean) {
  const runs = quick ? 100 : 500;
  const result: Record<string, unknown> = {};
  const medians: Record<number, number> = {};
  for (const n of [100, 1000, 10000]) {
    const db = transcriptOf(n);
    // The same query as transcript.ts messagesBefore().
    const page = db.prepare(
      "SELECT seq, role, content, tool_name, tool_call_id FROM transcript WHERE session_id = 'ses_bench' AND seq > 0 AND seq < ? ORDER BY seq DESC LIMIT ?",
    );
    medians[n] = await median(runs, () => {
      const rows = collectRecentRows((before, limit) => page.all(before, limit) as unknown as Row[]);
      prepareHistory(rows, { window: { contextWindow: 131072, maxOutputTokens: 4096 }, fixedTokens: 2000 });
    });
    result[`messages_${n}`] = { median_us: medians[n] };
    db.close();
  }
  result.ratio_10000_to_100 = Math.round(((medians[10000] as number) / (medians[100] as number)) * 100) / 100;
  result.target = "≤ 1.5";
  return result;
}

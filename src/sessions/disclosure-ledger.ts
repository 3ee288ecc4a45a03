/**
 * The conversation's disclosure ledger in the SessionDO (issue 33): one row, in a table made when the conversation
 * first releases model text (src/sessions/lazy-tables.ts). Loaded when a model call's text is judged; saved in the
 * commit of the model call's reply (round-commits.ts), so what was released and what the ledger says of it land
 * together. A refused release is counted and its reason kept, for the audit and the admin view.
 */
import { hiddenIndex } from "../prompts/leak-guard/hidden-index";
import { DisclosureLedger, type LedgerState } from "../prompts/leak-guard/ledger";
import type { Sql } from "../storage/sql";
import { ensureLazyTables, readLazy } from "./lazy-tables";

type Row = { index_key: string; covered: string; tail: string; refusals: number };

/** The conversation's ledger over the hidden layers of a turn (`extraHidden`: its inline L2). */
export function loadLedger(sql: Sql, extraHidden: readonly string[] = []): DisclosureLedger {
  const row = readLazy<Row | undefined>(
    sql,
    "disclosure_ledger",
    undefined,
    () => sql.one<Row>`SELECT index_key, covered, tail, refusals FROM disclosure_ledger WHERE id = 1`,
  );
  const state: LedgerState | null = row ? { key: row.index_key, covered: JSON.parse(row.covered) as number[], tail: row.tail } : null;
  return new DisclosureLedger(hiddenIndex(extraHidden), state);
}

/**
 * Saves the ledger when it changed since `loaded` (call inside the reply's transaction); `refusal` counts a refused
 * release and keeps its reason.
 */
export function saveLedger(sql: Sql, ledger: DisclosureLedger, loaded: string, refusal?: string): void {
  const state = ledger.state();
  const json = JSON.stringify(state);
  if (json === loaded && refusal === undefined) return;
  ensureLazyTables(sql, "disclosure_ledger");
  const now = new Date().toISOString();
  sql.run`INSERT INTO disclosure_ledger (id, index_key, covered, tail, refusals, last_refusal, updated_at)
    VALUES (1, ${state.key}, ${JSON.stringify(state.covered)}, ${state.tail}, ${refusal ? 1 : 0}, ${refusal ?? null}, ${now})
    ON CONFLICT (id) DO UPDATE SET index_key = excluded.index_key, covered = excluded.covered, tail = excluded.tail,
      refusals = refusals + excluded.refusals, last_refusal = COALESCE(excluded.last_refusal, last_refusal), updated_at = excluded.updated_at`;
}

/** What an admin or a test reads: coverage and refusals so far (none when the conversation released nothing). */
export function ledgerSummary(sql: Sql): { covered: number; refusals: number; lastRefusal: string | null } | null {
  return readLazy(sql, "disclosure_ledger", null, () => {
    const row = sql.one<{
      covered: string;
      refusals: number;
      last_refusal: string | null;
    }>`SELECT covered, refusals, last_refusal FROM disclosure_ledger WHERE id = 1`;
    return row ? { covered: (JSON.parse(row.covered) as number[]).length, refusals: row.refusals, lastRefusal: row.last_refusal } : null;
  });
}

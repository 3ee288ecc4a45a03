/**
 * The columns of the runs list, one entry each: its header, its cell's class and how a run fills it. A column is
 * added here and nowhere else (tokens and cost, D-082, are two entries). Each cell carries its header as
 * `data-label`, which the narrow-screen layout (admin.css) shows beside the value.
 */

import { durationText } from "../durations.ts";
import { countText, usdText, usdTitle } from "../usage-format.ts";
import { h, time } from "./dom.mts";

/** A run of GET /api/admin/runs (RunIndexEntry); the previews and counts are null on runs indexed before D-079. */
export interface RunRow {
  run_id: string;
  agent_id: string;
  source: string;
  status: string;
  caller_id: string | null;
  created_at: string;
  updated_at: string;
  message_preview: string | null;
  output_preview: string | null;
  duration_ms: number | null;
  rounds: number | null;
  tool_calls: number | null;
  /** D-082: provider-reported tokens and the cost (exact USD string; null: not priced or not reported). */
  tokens: { prompt: number; completion: number; cached: number; total: number };
  cost: { usd: string } | null;
}

/** How many characters of a run id the list shows: its ids share their first 68 (`run_` + the session object's id). */
const SHORT_ID_CHARS = 8;

/** A run id by its distinguishing part: `…` and its last characters (the whole id goes in a title). */
export function shortId(runId: string): string {
  return runId.length > SHORT_ID_CHARS ? `…${runId.slice(-SHORT_ID_CHARS)}` : runId;
}

const dash = (v: string | number | null | undefined) => (v === null || v === undefined || v === "" ? "—" : String(v));

interface Column {
  label: string;
  /** The cell's class (selectors: `td.status`, `td.message` …). */
  cls: string;
  cell: (run: RunRow) => Node | string;
}

/** The runs list's columns, in order. */
export const RUN_COLUMNS: readonly Column[] = [
  {
    label: "run",
    cls: "run",
    cell: (r) => h("a", { class: "short-id", title: r.run_id, href: `#/runs/${encodeURIComponent(r.run_id)}` }, shortId(r.run_id)),
  },
  { label: "created", cls: "created", cell: (r) => time(r.created_at) },
  { label: "agent", cls: "agent", cell: (r) => r.agent_id },
  { label: "caller", cls: "caller", cell: (r) => dash(r.caller_id) },
  { label: "source", cls: "source", cell: (r) => r.source },
  { label: "status", cls: "status", cell: (r) => r.status },
  { label: "message", cls: "message preview", cell: (r) => dash(r.message_preview) },
  { label: "answer", cls: "answer preview", cell: (r) => dash(r.output_preview) },
  { label: "duration", cls: "duration num", cell: (r) => durationText(r.duration_ms) },
  { label: "rounds", cls: "rounds num", cell: (r) => dash(r.rounds) },
  { label: "tool calls", cls: "tools num", cell: (r) => dash(r.tool_calls) },
  { label: "tokens", cls: "tokens num", cell: (r) => tokensCell(r.tokens) },
  { label: "cost", cls: "cost num", cell: (r) => h("span", { title: usdTitle(r.cost?.usd ?? null) }, usdText(r.cost?.usd ?? null)) },
];

/** The total, with its parts in the title (a run without a model call: —). */
function tokensCell(t: RunRow["tokens"] | undefined): Node | string {
  if (!t || t.total === 0) return "—";
  return h(
    "span",
    { title: `prompt ${countText(t.prompt)} (cached ${countText(t.cached)}) · completion ${countText(t.completion)}` },
    countText(t.total),
  );
}

/** The cells of a run's row. */
export function runCells(run: RunRow): HTMLTableCellElement[] {
  return RUN_COLUMNS.map((c) =>
    h("td", { class: c.cls, "data-label": c.label, ...(c.cls === "status" ? { "data-status": run.status } : {}) }, c.cell(run)),
  );
}

/**
 * Compaction (S1 §5.3): when the context overflows (or the model asks with
 * `condense_now` / `condense_smart`), older turns are replaced by a summary —
 * a derived artifact with evidence pointers (the transcript seq ranges it
 * stands for) — while the last N turns stay verbatim. L1–L4 are not touched:
 * the summary is user-derived and goes inside L6 (DESIGN "Retrieved memory,
 * compaction summaries"). Deterministic and extractive: the same transcript
 * gives the same summary, and every line points at the seqs it came from.
 */

export interface CompactableRow {
  seq: number;
  role: "user" | "assistant" | "tool";
  content: string;
  tool_name?: string | null;
}

export interface CompactionSummary {
  fromSeq: number;
  toSeq: number;
  /** Seq ranges of the turns summarised, e.g. [[1, 4], [5, 9]]. */
  evidence: [number, number][];
  text: string;
}

export interface CompactionResult {
  summary: CompactionSummary | null;
  kept: CompactableRow[];
}

const LINE_CHARS = 160;

function excerpt(text: string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length <= LINE_CHARS ? flat : `${flat.slice(0, LINE_CHARS - 1)}…`;
}

/** Splits rows into turns: a user message and everything up to the next one. */
export function turns(rows: readonly CompactableRow[]): CompactableRow[][] {
  const out: CompactableRow[][] = [];
  for (const row of rows) {
    if (row.role === "user" || out.length === 0) out.push([row]);
    else (out.at(-1) as CompactableRow[]).push(row);
  }
  return out;
}

/**
 * Keeps the last `keepTurns` turns and summarises the rest into at most
 * `maxSummaryChars` characters (older lines go first when it must be shorter).
 */
export function compact(rows: readonly CompactableRow[], keepTurns: number, maxSummaryChars = 2000): CompactionResult {
  const all = turns(rows);
  if (all.length <= keepTurns) return { summary: null, kept: [...rows] };
  const old = all.slice(0, all.length - keepTurns);
  const kept = all.slice(all.length - keepTurns).flat();
  const lines: string[] = [];
  const evidence: [number, number][] = [];
  for (const turn of old) {
    const first = (turn[0] as CompactableRow).seq;
    const last = (turn.at(-1) as CompactableRow).seq;
    evidence.push([first, last]);
    const user = turn.find((r) => r.role === "user");
    const answer = [...turn].reverse().find((r) => r.role === "assistant" && r.content.trim().length > 0);
    const tools = turn.filter((r) => r.role === "tool").map((r) => r.tool_name ?? "tool");
    const parts = [`[seq ${first}-${last}]`];
    if (user) parts.push(`user: ${excerpt(user.content)}`);
    if (tools.length > 0) parts.push(`tools: ${[...new Set(tools)].join(", ")}`);
    if (answer) parts.push(`assistant: ${excerpt(answer.content)}`);
    lines.push(parts.join(" | "));
  }
  // Keep the most recent lines when the summary must be shorter; note what was left out.
  let text = lines.join("\n");
  let start = 0;
  while (text.length > maxSummaryChars && start < lines.length - 1) {
    start++;
    text = [`[seq ${evidence[0]?.[0]}-${evidence[start - 1]?.[1]}] (older turns, see the archived transcript)`, ...lines.slice(start)].join(
      "\n",
    );
  }
  // `old` is non-empty here (there are more turns than are kept), and every turn has a row.
  const fromSeq = (evidence[0] as [number, number])[0];
  const toSeq = (evidence.at(-1) as [number, number])[1];
  return { summary: { fromSeq, toSeq, evidence, text: `Summary of turns seq ${fromSeq}-${toSeq}:\n${text}` }, kept };
}

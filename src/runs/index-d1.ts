/**
 * The D1 run index (migrations/0003_runs.sql, previews and counts since 0021): which runs exist, for listing.
 * Shipped by the SessionDO's index outbox (src/sessions/index-outbox.ts) within a second of a run's change;
 * reading one run never needs it (the run id names its object).
 */
import { type IndexedUsage, listedUsageOf } from "../usage/view";

export interface RunIndexRow {
  run_id: string;
  agent_id: string;
  session_key: string;
  session_id: string;
  caller_id: string | null;
  source: string;
  status: string;
  created_at: string;
  updated_at: string;
  /** D-079: the user message's first PREVIEW_CHARS characters (as the transcript stored it: redacted). NULL on older rows. */
  message_preview?: string | null;
  /** D-079: the answer's (the guarded output's) first PREVIEW_CHARS characters. */
  output_preview?: string | null;
  /** D-079: started → finished, once the run has ended. */
  duration_ms?: number | null;
  /** D-079: tool rounds (model answers that asked for tools), as `run.completed` counts them. */
  rounds?: number | null;
  /** D-079: tool calls the gateway took on. */
  tool_calls?: number | null;
}

/**
 * A run as the index lists it: every column, NULL where an older row has none, and (D-082) its tokens and cost from
 * the usage columns of the same row.
 */
export type ListedRun = { [K in keyof RunIndexRow]-?: Exclude<RunIndexRow[K], undefined> } & ReturnType<typeof listedUsageOf>;

/** A preview's length in characters (an ellipsis ends a cut one). */
export const PREVIEW_CHARS = 80;

/** A redaction placeholder (`[REDACTED:<kind>]`) open at the end of a cut text: the cut moves before it. */
const OPEN_PLACEHOLDER = /\[(?:R(?:E(?:D(?:A(?:C(?:T(?:E(?:D(?::[a-z0-9_]*)?)?)?)?)?)?)?)?)?$/;

/**
 * One line of at most PREVIEW_CHARS characters: whitespace runs become one space, a longer text is cut (never inside
 * a surrogate pair or a redaction placeholder) and ends with "…". Null stays null.
 */
export function preview(text: string | null | undefined): string | null {
  if (text === null || text === undefined) return null;
  const chars = [...text.replace(/\s+/g, " ").trim()];
  if (chars.length <= PREVIEW_CHARS) return chars.join("");
  const cut = chars.slice(0, PREVIEW_CHARS - 1).join("");
  return `${cut.replace(OPEN_PLACEHOLDER, "").trimEnd()}…`;
}

/** What the SessionDO knows of a run for its index row (src/sessions/index-outbox-store.ts `runIndexSource`). */
export interface RunIndexSource {
  agent_id: string;
  session_id: string;
  caller_id: string | null;
  source: string;
  status: string;
  created_at: string;
  updated_at: string;
  started_at: string | null;
  finished_at: string | null;
  rounds: number;
  tool_calls: number;
  message_head: string | null;
  output_head: string | null;
}

/** A run's index row from what its SessionDO holds: the previews cut, the duration once it has ended. */
export function runIndexRow(runId: string, sessionKey: string, s: RunIndexSource): RunIndexRow {
  const ended = s.started_at !== null && s.finished_at !== null;
  return {
    run_id: runId,
    agent_id: s.agent_id,
    session_key: sessionKey,
    session_id: s.session_id,
    caller_id: s.caller_id,
    source: s.source,
    status: s.status,
    created_at: s.created_at,
    updated_at: s.updated_at,
    message_preview: preview(s.message_head),
    // A run still waiting (for an approval) has no answer yet: its output column is empty, not an answer.
    output_preview: s.output_head === null || (s.output_head === "" && !ended) ? null : preview(s.output_head),
    duration_ms: ended ? Math.max(0, Date.parse(s.finished_at as string) - Date.parse(s.started_at as string)) : null,
    rounds: s.rounds,
    tool_calls: s.tool_calls,
  };
}

/**
 * Issue 25 §2 (migrations/0020_usage.sql, D-078): the run's usage so far, carried by its index row. The table's
 * triggers add each change of `requests` to the usage rollups, so the usage costs the run-stop batch no statement.
 */
export interface RunUsageColumns {
  /** The caller key (src/runs/caller.ts); null before the run is known to the shipper. */
  caller: string | null;
  /** '' for runs no job started. */
  job_id: string;
  /** `provider:model`. */
  model: string;
  requests: number;
  unreported_requests: number;
  uncosted_requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  /** Pico-USD (10^-12 USD) of the costed requests. */
  cost_pico: number;
}

/** Usage columns of a run with no model call yet. */
export const NO_RUN_USAGE: RunUsageColumns = {
  caller: null,
  job_id: "",
  model: "",
  requests: 0,
  unreported_requests: 0,
  uncosted_requests: 0,
  prompt_tokens: 0,
  completion_tokens: 0,
  cached_tokens: 0,
  cost_pico: 0,
};

/** Creates or updates a run's index row (without usage: a run that made no model call, or a test's listing). */
export async function indexRun(db: D1Database, r: RunIndexRow): Promise<void> {
  await runIndexStatement(db, r, NO_RUN_USAGE).run();
}

/**
 * The upsert of a run's index row (with its usage), for a batch. Idempotent, and never moves a row back to an older
 * state: a batch retried (or delivered late by an evicted instance) after a newer one changes nothing — nor, then,
 * do the usage triggers, which count a change of `requests` only.
 */
export function runIndexStatement(db: D1Database, r: RunIndexRow, u: RunUsageColumns): D1PreparedStatement {
  return db
    .prepare(
      `INSERT INTO runs (run_id, agent_id, session_key, session_id, caller_id, source, status, created_at, updated_at,
                         message_preview, output_preview, duration_ms, rounds, tool_calls,
                         caller, job_id, model, requests, unreported_requests, uncosted_requests, prompt_tokens,
                         completion_tokens, cached_tokens, cost_pico)
       VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)
       ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, updated_at = excluded.updated_at,
         message_preview = excluded.message_preview, output_preview = excluded.output_preview,
         duration_ms = excluded.duration_ms, rounds = excluded.rounds, tool_calls = excluded.tool_calls,
         caller = excluded.caller, job_id = excluded.job_id, model = excluded.model, requests = excluded.requests,
         unreported_requests = excluded.unreported_requests, uncosted_requests = excluded.uncosted_requests,
         prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
         cached_tokens = excluded.cached_tokens, cost_pico = excluded.cost_pico
       WHERE excluded.updated_at >= runs.updated_at AND excluded.requests >= runs.requests`,
    )
    .bind(
      r.run_id,
      r.agent_id,
      r.session_key,
      r.session_id,
      r.caller_id,
      r.source,
      r.status,
      r.created_at,
      r.updated_at,
      r.message_preview ?? null,
      r.output_preview ?? null,
      r.duration_ms ?? null,
      r.rounds ?? null,
      r.tool_calls ?? null,
      u.caller,
      u.job_id,
      u.model,
      u.requests,
      u.unreported_requests,
      u.uncosted_requests,
      u.prompt_tokens,
      u.completion_tokens,
      u.cached_tokens,
      u.cost_pico,
    );
}

export interface RunFilters {
  agentId?: string | undefined;
  status?: string | undefined;
  callerId?: string | undefined;
  /** Only runs created at or after this ISO time (UTC, as `toISOString` writes it). */
  from?: string | undefined;
  /** Only runs created before this ISO time. */
  to?: string | undefined;
  /** Keyset cursor: only runs after this (created_at, run_id) in list order. */
  after?: readonly [createdAt: string, runId: string] | undefined;
  limit: number;
}

/** The columns a listed run has (its usage columns become `tokens` and `cost`: listedUsageOf). */
const LISTED = `run_id, agent_id, session_key, session_id, caller_id, source, status, created_at, updated_at,
  message_preview, output_preview, duration_ms, rounds, tool_calls,
  requests, uncosted_requests, prompt_tokens, completion_tokens, cached_tokens, CAST(cost_pico AS TEXT) AS cost_pico`;

/**
 * The statement of a page of runs: only the filters given are in it, so SQLite can read an index range
 * (runs_by_agent, runs_by_status, runs_by_caller or runs_by_created, each ordered by created_at) rather than test
 * every row — `(?1 IS NULL OR agent_id = ?1)` would keep it from using any of them.
 */
export function runListQuery(f: RunFilters): { sql: string; binds: (string | number)[] } {
  const where: string[] = [];
  const binds: (string | number)[] = [];
  const add = (clause: string, ...values: string[]) => {
    where.push(clause.replace(/\?/g, () => `?${binds.push(values.shift() as string)}`));
  };
  if (f.agentId !== undefined) add("agent_id = ?", f.agentId);
  if (f.status !== undefined) add("status = ?", f.status);
  if (f.callerId !== undefined) add("caller_id = ?", f.callerId);
  if (f.from !== undefined) add("created_at >= ?", f.from);
  if (f.to !== undefined) add("created_at < ?", f.to);
  if (f.after) add("(created_at, run_id) < (?, ?)", f.after[0], f.after[1]);
  binds.push(f.limit);
  const filter = where.length > 0 ? `WHERE ${where.join(" AND ")}` : "";
  return { sql: `SELECT ${LISTED} FROM runs ${filter} ORDER BY created_at DESC, run_id DESC LIMIT ?${binds.length}`, binds };
}

/** Runs matching the filters, newest first: (created_at, run_id) descending, a stable and unique order. */
export async function listRuns(db: D1Database, f: RunFilters): Promise<ListedRun[]> {
  const { sql, binds } = runListQuery(f);
  const rows = await db
    .prepare(sql)
    .bind(...binds)
    .all<Omit<ListedRun, "tokens" | "cost"> & IndexedUsage>();
  return rows.results.map(({ requests, uncosted_requests, prompt_tokens, completion_tokens, cached_tokens, cost_pico, ...run }) => ({
    ...run,
    ...listedUsageOf({ requests, uncosted_requests, prompt_tokens, completion_tokens, cached_tokens, cost_pico }),
  }));
}

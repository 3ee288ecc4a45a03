/**
 * The SessionDO's SQLite schema, as ordered migrations (see docs/storage.md).
 * Append new entries; never edit one that has shipped.
 */

import { IDEMPOTENCY_SCHEMA } from "../idempotency/store";
import type { Migrations } from "../storage/sql";
import { INDEX_OUTBOX_SCHEMA } from "./index-outbox-store";
import { AUTOMATION_COMPLETIONS_SCHEMA, dropLazyIfEmpty, MEMORY_SCHEMA, NOTIFY_OUTBOX_SCHEMA, REPLY_SCHEMA } from "./lazy-tables";

export const SESSION_MIGRATIONS: Migrations = [
  // v1: what the object knows about itself.
  `CREATE TABLE session_meta (
     key TEXT PRIMARY KEY,
     value TEXT NOT NULL
   );`,
  // v2: the prompt manifest of every turn (S2 §3), hash-only, for admins.
  `CREATE TABLE prompt_manifests (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     turn_id TEXT NOT NULL UNIQUE,
     stack_sha256 TEXT NOT NULL,
     manifest TEXT NOT NULL,
     created_at TEXT NOT NULL
   );`,
  // v3: the transcript (S1 §5.2's JSONL, one row per message), generations and the run queue.
  `CREATE TABLE transcript (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     session_id TEXT NOT NULL,
     role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
     content TEXT NOT NULL,
     ts TEXT NOT NULL,
     run_id TEXT,
     tool_name TEXT,
     tool_call_id TEXT,
     redactions TEXT NOT NULL DEFAULT '[]'
   );
   CREATE INDEX transcript_by_session ON transcript (session_id, seq);
   CREATE TABLE generations (
     session_id TEXT PRIMARY KEY,
     started_at TEXT NOT NULL,
     archived_at TEXT,
     archive_key TEXT
   );
   CREATE TABLE runs (
     id TEXT PRIMARY KEY,
     session_id TEXT NOT NULL,
     source TEXT NOT NULL,
     agent_id TEXT NOT NULL,
     status TEXT NOT NULL,
     message_seq INTEGER NOT NULL,
     created_at TEXT NOT NULL,
     updated_at TEXT NOT NULL
   );
   CREATE INDEX runs_by_status ON runs (status, created_at);
   CREATE TABLE session_state (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     session_key TEXT NOT NULL,
     agent_id TEXT NOT NULL,
     session_id TEXT NOT NULL
   );
   CREATE TABLE archived_parts (
     session_id TEXT NOT NULL,
     first_seq INTEGER NOT NULL,
     last_seq INTEGER NOT NULL,
     r2_key TEXT NOT NULL,
     PRIMARY KEY (session_id, first_seq)
   );`,
  // v4: the S4 checkpoint (state, revision, bounded recent messages, trace tail).
  `CREATE TABLE checkpoint (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     revision INTEGER NOT NULL,
     updated_ts REAL NOT NULL,
     state TEXT NOT NULL,
     trace_tail TEXT NOT NULL
   );`,
  // v5: memory items (summaries, decisions, notes) and their FTS5 index (S4 §5).
  MEMORY_SCHEMA,
  // v6: live size of each generation, kept by triggers so that checking maxTurns/maxBytes on every
  // message reads one row instead of scanning the transcript (per-message cost must not grow with it).
  `ALTER TABLE generations ADD COLUMN live_messages INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE generations ADD COLUMN live_user_turns INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE generations ADD COLUMN live_bytes INTEGER NOT NULL DEFAULT 0;
   UPDATE generations SET
     live_messages = (SELECT COUNT(*) FROM transcript t WHERE t.session_id = generations.session_id),
     live_user_turns = (SELECT COUNT(*) FROM transcript t WHERE t.session_id = generations.session_id AND t.role = 'user'),
     live_bytes = (SELECT COALESCE(SUM(LENGTH(CAST(t.content AS BLOB))), 0) FROM transcript t WHERE t.session_id = generations.session_id);
   CREATE TRIGGER transcript_size_insert AFTER INSERT ON transcript BEGIN
     UPDATE generations SET live_messages = live_messages + 1, live_user_turns = live_user_turns + (NEW.role = 'user'),
       live_bytes = live_bytes + LENGTH(CAST(NEW.content AS BLOB)) WHERE session_id = NEW.session_id;
   END;
   CREATE TRIGGER transcript_size_delete AFTER DELETE ON transcript BEGIN
     UPDATE generations SET live_messages = live_messages - 1, live_user_turns = live_user_turns - (OLD.role = 'user'),
       live_bytes = live_bytes - LENGTH(CAST(OLD.content AS BLOB)) WHERE session_id = OLD.session_id;
   END;
   CREATE TRIGGER transcript_size_update AFTER UPDATE OF content ON transcript BEGIN
     UPDATE generations SET live_bytes = live_bytes - LENGTH(CAST(OLD.content AS BLOB)) + LENGTH(CAST(NEW.content AS BLOB))
       WHERE session_id = NEW.session_id;
   END;`,
  // v7: the run engine. Each run carries the spec it was accepted under (model, tools, limits: no secrets),
  // its outcome, lifecycle events (S3 §2), S4 §6 traces, and every tool call it planned, keyed by
  // (round, tool_call_id) so a resumed run never executes a call twice. The failure loop (S3 §2) is per session.
  `ALTER TABLE runs ADD COLUMN spec TEXT;
   ALTER TABLE runs ADD COLUMN caller_id TEXT;
   ALTER TABLE runs ADD COLUMN started_at TEXT;
   ALTER TABLE runs ADD COLUMN finished_at TEXT;
   ALTER TABLE runs ADD COLUMN output TEXT;
   ALTER TABLE runs ADD COLUMN error TEXT;
   ALTER TABLE runs ADD COLUMN rounds INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN tool_calls INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN executions INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN prompt_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN completion_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN indexed INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE run_events (
     run_id TEXT NOT NULL,
     seq INTEGER NOT NULL,
     event_id TEXT NOT NULL UNIQUE,
     event_type TEXT NOT NULL,
     ts TEXT NOT NULL,
     payload TEXT NOT NULL,
     PRIMARY KEY (run_id, seq)
   ) WITHOUT ROWID;
   CREATE TABLE run_traces (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     run_id TEXT NOT NULL,
     ts REAL NOT NULL,
     kind TEXT NOT NULL,
     data TEXT NOT NULL
   );
   CREATE INDEX run_traces_by_run ON run_traces (run_id, id);
   CREATE TABLE tool_executions (
     run_id TEXT NOT NULL,
     tool_call_id TEXT NOT NULL,
     tool TEXT NOT NULL,
     args TEXT NOT NULL,
     round INTEGER NOT NULL,
     ordinal INTEGER NOT NULL,
     assistant_seq INTEGER NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('planned', 'started', 'done')),
     ok INTEGER,
     output TEXT,
     error TEXT,
     summary TEXT,
     started_at TEXT,
     finished_at TEXT,
     duration_ms INTEGER,
     PRIMARY KEY (run_id, round, tool_call_id)
   ) WITHOUT ROWID;
   CREATE TABLE failure_loop (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     state TEXT NOT NULL
   );`,
  // v8: each executed tool call keeps its S3 §1 request and response envelopes (redacted), for admins and bundles.
  `ALTER TABLE tool_executions ADD COLUMN request TEXT;
   ALTER TABLE tool_executions ADD COLUMN response TEXT;`,
  // v9: human approvals (S1 §3.3, DESIGN "Approvals"): one per tool call that needs one, with its own id,
  // the redacted arguments and their hash (a call whose arguments changed is refused), and an expiry.
  // Tool calls keep the policy decision that gated them (S1 §4.1 gate outcome).
  `CREATE TABLE approvals (
     id TEXT PRIMARY KEY,
     run_id TEXT NOT NULL,
     round INTEGER NOT NULL,
     tool_call_id TEXT NOT NULL,
     tool TEXT NOT NULL,
     args TEXT NOT NULL,
     args_sha256 TEXT NOT NULL,
     requester TEXT NOT NULL,
     channel TEXT NOT NULL,
     reason TEXT NOT NULL,
     status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
     created_at TEXT NOT NULL,
     expires_at TEXT NOT NULL,
     decided_at TEXT,
     decided_by TEXT,
     decision_reason TEXT,
     UNIQUE (run_id, round, tool_call_id)
   );
   CREATE INDEX approvals_pending ON approvals (status, expires_at);
   ALTER TABLE tool_executions ADD COLUMN decision TEXT;`,
  // v10: the audit outbox (S3 §3 events waiting for R2), each day's chain head of this object's audit stream,
  // the one segment being written (so a retry writes the same bytes), and which runs have their bundle in R2.
  `CREATE TABLE audit_outbox (
     seq INTEGER PRIMARY KEY AUTOINCREMENT,
     day TEXT NOT NULL,
     event TEXT NOT NULL
   );
   CREATE TABLE audit_heads (
     day TEXT PRIMARY KEY,
     counter INTEGER NOT NULL,
     sha256 TEXT NOT NULL
   );
   CREATE TABLE audit_pending (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     day TEXT NOT NULL,
     key TEXT NOT NULL,
     body TEXT NOT NULL,
     counter INTEGER NOT NULL,
     sha256 TEXT NOT NULL,
     seqs TEXT NOT NULL,
     attempts INTEGER NOT NULL,
     next_attempt_at INTEGER NOT NULL
   );
   ALTER TABLE runs ADD COLUMN bundled INTEGER NOT NULL DEFAULT 0;`,
  // v11: scheduler firings (S3 §4). A run queued for a firing carries its run key, unique here, so a firing
  // handed over twice (a tick retried after a crash) is one run. Its notification waits in an outbox until sent.
  `ALTER TABLE runs ADD COLUMN dispatch_key TEXT;
   CREATE UNIQUE INDEX runs_dispatch_key ON runs (dispatch_key) WHERE dispatch_key IS NOT NULL;
   ${NOTIFY_OUTBOX_SCHEMA}`,
  // v12: S5 tools and durable idempotency. The session's S5 type (setup sessions alone get setup-only tools);
  // the idempotency store of tool calls — sandbox callbacks and run tool calls — keyed by (tool scope, call id);
  // automation completions, one per completion_id.
  `ALTER TABLE session_state ADD COLUMN session_type TEXT NOT NULL DEFAULT 'ordinary';
   ${IDEMPOTENCY_SCHEMA}
   ${AUTOMATION_COMPLETIONS_SCHEMA}`,
  // v13: chat-channel replies (issue 10): one outbox row per run a channel message started, sent once from the alarm.
  REPLY_SCHEMA,
  // v14: a finished job run's status and automation completion are written to its D1 firing row once (issue 21 §1).
  `ALTER TABLE runs ADD COLUMN firing_reported INTEGER NOT NULL DEFAULT 0;`,
  // v15 (issue 23, D-055): each transcript row's token estimate, written with the row (src/context/history.ts
  // rowTokens), so a turn's history is never tokenised again. NULL on rows stored before: estimated once when a
  // turn first reads them, and written back (transcript.ts historyPage).
  `ALTER TABLE transcript ADD COLUMN tokens INTEGER;`,
  // v16 (issue 23, D-055): session memory is created when first written (src/sessions/lazy-tables.ts), so a new
  // object's schema lacks it; an object that holds memory items keeps its tables. No later migration touches them.
  dropLazyIfEmpty("memory"),
  // v17: the index outbox (issue 23): D1 index rows queued by triggers in the transaction of the change they
  // reflect, shipped in one D1 batch per shipping window. Queued once here: runs whose last index write failed
  // (never retried before this version), the session row and its generations — upserts, so re-shipping is harmless.
  `${INDEX_OUTBOX_SCHEMA}
   INSERT OR REPLACE INTO index_outbox (kind, key) SELECT 'run', id FROM runs WHERE indexed = 0;
   INSERT OR REPLACE INTO index_outbox (kind, key) SELECT 'session', '' FROM session_state;
   INSERT OR REPLACE INTO index_outbox (kind, key) SELECT 'generation', session_id FROM generations;`,
  // v18 (issue 23): the calls that can have opened an env request, found without a scan. A generation with none
  // has no fulfilled keys to name in its prompt, so its runs skip that D1 read (src/runs/round-prompt.ts).
  `CREATE INDEX tool_executions_env_requests ON tool_executions (run_id) WHERE tool = 'request_env_variables';`,
  // v19 (issue 23, D-062): job notifications, automation completions and channel replies are created when first
  // written (src/sessions/lazy-tables.ts), like memory at v16; an object whose tables hold rows keeps them.
  dropLazyIfEmpty("notify_outbox", "automation_completions", "reply_outbox"),
  // v20 (issue 25 §2, D-078): each run's provider-reported usage and cost, added up in the commit of each model call
  // (runs.prompt_tokens/completion_tokens also count estimates for calls the provider reported nothing for; these do
  // not). Cost in pico-USD of the calls with a price and reported usage. Shipped to D1 with the run's index row.
  `ALTER TABLE runs ADD COLUMN model_calls INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN unreported_calls INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN uncosted_calls INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN reported_prompt_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN reported_completion_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
   ALTER TABLE runs ADD COLUMN cost_pico INTEGER NOT NULL DEFAULT 0;`,
];

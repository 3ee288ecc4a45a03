-- Scheduler (S3 §4, DESIGN "Scheduler"): job records and their firings.
--
-- A job's S3 fields are stored as given (notify flattened into two columns); the
-- rest is the scheduler's own state. `@every` slots are anchor_ms + k·interval_ms
-- (k ≥ 1), anchored when the schedule was set; a one-shot's one slot is anchor_ms.
-- next_run_ms is the next slot not yet fired (NULL: the job will not fire again).
CREATE TABLE jobs (
  job_id TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  schedule TEXT NOT NULL,
  message TEXT NOT NULL,
  mode TEXT NOT NULL CHECK (mode IN ('isolated', 'main_like')),
  notify_channel TEXT NOT NULL DEFAULT 'none',
  notify_target TEXT NOT NULL DEFAULT '',
  enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),
  timezone TEXT NOT NULL DEFAULT 'UTC',
  created_at TEXT NOT NULL,           -- ISO 8601 UTC
  updated_at TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('every', 'once')),
  interval_ms INTEGER,                -- every: the interval; once: NULL
  anchor_ms INTEGER NOT NULL,         -- every: when the schedule was set; once: the time
  next_run_ms INTEGER,                -- the next slot to fire; NULL when none
  last_fired_at TEXT                  -- scheduled_for of the latest firing
);
-- The tick's one query: enabled jobs whose next slot has come.
CREATE INDEX jobs_due ON jobs (next_run_ms) WHERE enabled = 1 AND next_run_ms IS NOT NULL;
CREATE INDEX jobs_by_agent ON jobs (agent_id, job_id);

-- One row per firing, keyed by its run key (job_id, scheduled_for): a tick claims a
-- firing by inserting it, so overlapping or retried ticks dispatch it at most once.
-- A claim whose tick died before dispatching is taken over by a later tick after the
-- lease (the SessionDO dedupes by the same key, so the firing runs exactly once).
CREATE TABLE job_firings (
  job_id TEXT NOT NULL,
  scheduled_for TEXT NOT NULL,        -- ISO 8601 UTC of the slot
  agent_id TEXT NOT NULL,
  tick TEXT NOT NULL,                 -- the tick holding the claim
  status TEXT NOT NULL CHECK (status IN ('claimed', 'dispatched', 'skipped', 'failed')),
  message TEXT NOT NULL,              -- the job as it was when the firing was claimed
  mode TEXT NOT NULL,
  notify_target TEXT NOT NULL DEFAULT '',
  missed INTEGER NOT NULL DEFAULT 0,  -- earlier slots of this job not replayed (S3: missed windows are not replayed)
  claimed_at TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 1,
  run_id TEXT,
  session_key TEXT,
  dispatched_at TEXT,
  error TEXT,
  notify_channel TEXT NOT NULL DEFAULT 'none',
  notify_status TEXT NOT NULL DEFAULT 'none' CHECK (notify_status IN ('none', 'pending', 'delivered', 'failed')),
  notify_attempts INTEGER NOT NULL DEFAULT 0,
  notify_error TEXT,
  notified_at TEXT,
  PRIMARY KEY (job_id, scheduled_for)
);
CREATE INDEX job_firings_claimed ON job_firings (claimed_at) WHERE status = 'claimed';
CREATE INDEX job_firings_by_tick ON job_firings (tick);

-- Run index: one row per run, for listing across sessions. The run itself lives in its SessionDO
-- (the run id names that object, so reading a run never needs this table).
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  session_key TEXT NOT NULL,
  session_id TEXT NOT NULL,
  caller_id TEXT,                  -- the api caller that queued it; NULL for scheduler/channel runs
  source TEXT NOT NULL,            -- http | chat | scheduler | channel name
  status TEXT NOT NULL,            -- queued | running | completed | failed | cancelled
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
CREATE INDEX runs_by_agent ON runs (agent_id, created_at);
CREATE INDEX runs_by_status ON runs (status, created_at);

-- Provider tokens used per agent per UTC day, for the per-agent token budget. A model call
-- reserves its worst case (estimated input + maxOutputTokens) before the network and settles
-- to the provider's reported usage after it.
CREATE TABLE agent_token_usage (
  agent_id TEXT NOT NULL,
  day TEXT NOT NULL,               -- YYYY-MM-DD (UTC)
  tokens INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (agent_id, day)
);

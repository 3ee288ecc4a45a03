-- Foundation: heartbeats of the gateway's background machinery.
-- `cron` is written by every scheduler tick, so operators can see the trigger fires.
CREATE TABLE gateway_heartbeats (
  name TEXT PRIMARY KEY,
  last_at TEXT NOT NULL,          -- ISO 8601 UTC
  detail TEXT NOT NULL DEFAULT '{}' -- JSON
);

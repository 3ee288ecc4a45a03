-- Issue 24 §3 (D-074): who may talk to an agent through a chat channel (`channels.<name>.senders`).
--
-- channel_senders: one row per (agent, channel, sender) the policy refused at least once, or paired.
-- `refused` counts the messages that were acknowledged and dropped (never queued as runs) — the operator's view,
-- GET /api/admin/channels/senders. `replied_at`/`reply_claim`: the last answer to a refused sender (a pairing
-- code), claimed in one statement so concurrent deliveries answer at most once per window. `paired_at`: set when
-- an admin approved this sender's pairing code; from then on the sender is allowed for this agent and channel.
CREATE TABLE channel_senders (
  agent_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  sender TEXT NOT NULL,               -- the platform's user id, as a string
  refused INTEGER NOT NULL DEFAULT 0,
  last_refused_at TEXT,               -- ISO 8601 UTC
  replied_at INTEGER,                 -- ms since the epoch
  reply_claim TEXT,
  paired_at TEXT,                     -- ISO 8601 UTC
  PRIMARY KEY (agent_id, channel, sender)
);

-- Pairing codes: single-use, valid until expires_at (ms). At most one pending (unapproved) code per sender, so a
-- sender asking again while one is pending gets the same code.
CREATE TABLE channel_pairings (
  code TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  sender TEXT NOT NULL,
  created_at INTEGER NOT NULL,        -- ms since the epoch
  expires_at INTEGER NOT NULL,        -- ms since the epoch
  approved_at TEXT                    -- ISO 8601 UTC; NULL while pending
);
CREATE UNIQUE INDEX channel_pairings_pending ON channel_pairings (agent_id, channel, sender) WHERE approved_at IS NULL;
CREATE INDEX channel_pairings_by_expiry ON channel_pairings (approved_at, expires_at);

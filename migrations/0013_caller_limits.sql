-- Per-caller limits (issue 20 §4): one caller can no longer use up an agent's pending approvals or tokens for
-- everyone else. `caller` is the key the limits count against (src/runs/caller.ts): `api:<caller id>`,
-- `<channel>:<account>:<sender>`, `job:<job id>`, or `agent:<agent id>` for runs with no caller of their own.
-- Approvals indexed before this migration have no caller and count toward the agent's limit only.
ALTER TABLE approvals ADD COLUMN caller TEXT;
CREATE INDEX approvals_by_caller ON approvals (agent_id, caller, status, expires_at);

-- Provider tokens per caller per agent per UTC day (`agents.<id>.budget.tokensPerCallerPerDay`). `reservation`
-- names the last reservation that took tokens here: the agent's row is charged in the same D1 batch only if this
-- row's reservation is the one just made, so the two rows move together or not at all.
CREATE TABLE caller_token_usage (
  agent_id TEXT NOT NULL,
  caller TEXT NOT NULL,
  day TEXT NOT NULL,               -- YYYY-MM-DD (UTC)
  tokens INTEGER NOT NULL DEFAULT 0,
  reservation TEXT,
  PRIMARY KEY (agent_id, caller, day)
);

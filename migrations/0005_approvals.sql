-- Approval index: every approval request, for the admin list and the per-agent pending limit.
-- The approval itself (arguments, decision) lives in its SessionDO; the approval id names that object.
CREATE TABLE approvals (
  approval_id TEXT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  session_key TEXT NOT NULL,
  tool TEXT NOT NULL,
  status TEXT NOT NULL,            -- pending | approved | denied | expired
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  decided_at TEXT
);
CREATE INDEX approvals_by_agent ON approvals (agent_id, status, expires_at);
CREATE INDEX approvals_by_status ON approvals (status, created_at);

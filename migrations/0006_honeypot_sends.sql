-- Honeypot sends (S1 §3.3 Phase 2): one row per message.send delivered from an allowlisted template,
-- counted for the per-recipient and per-agent hourly rate limits. `recipient` is `{channel}:{to}`
-- (to lower-cased); `sent_at` is epoch milliseconds. Rows older than a day are pruned on insert.
CREATE TABLE honeypot_sends (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  agent_id TEXT NOT NULL,
  recipient TEXT NOT NULL,
  sent_at INTEGER NOT NULL
);
CREATE INDEX honeypot_sends_by_agent ON honeypot_sends (agent_id, sent_at);
CREATE INDEX honeypot_sends_by_recipient ON honeypot_sends (agent_id, recipient, sent_at);

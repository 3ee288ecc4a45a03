-- Issue 24 §2 (D-075): approvals decided from inside a Telegram or Slack chat.
--
-- approvals.decided_by / decided_via: who decided and through what — `admin` / `admin` for the admin API and the
-- dashboard, `telegram:<user id>` / `telegram` and `slack:<user id>` / `slack` for a chat button; NULL while pending
-- and for an expiry. Rows indexed before this migration read NULL (the SessionDO's record still has decided_by).
ALTER TABLE approvals ADD COLUMN decided_by TEXT;
ALTER TABLE approvals ADD COLUMN decided_via TEXT;

-- approval_buttons: one row per Approve / Deny button sent to a chat. The button carries a random 128-bit token
-- (base64url, 22 characters: it fits Telegram's 64-byte callback_data); only its SHA-256 is stored, so a leaked D1
-- export presses nothing. A row binds the token to one approval, one decision, one agent, one channel and one chat.
-- `used_*`: set on every button of the approval by the first press that reaches it, in one statement, so of two
-- concurrent presses (approve and deny, or the same button twice) exactly one goes on to decide.
CREATE TABLE approval_buttons (
  token_sha256 TEXT PRIMARY KEY,
  approval_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  decision TEXT NOT NULL CHECK (decision IN ('approve', 'deny')),
  channel TEXT NOT NULL CHECK (channel IN ('telegram', 'slack')),
  chat_id TEXT NOT NULL,              -- the Telegram chat id / Slack channel id the buttons were posted in
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL,           -- the approval's own expiry
  used_at TEXT,
  used_by TEXT,                       -- `telegram:<user id>` / `slack:<user id>` of the press that claimed the buttons
  used_event TEXT                     -- the platform delivery that claimed them (Telegram update id, Slack trigger id)
);
CREATE INDEX approval_buttons_by_approval ON approval_buttons (approval_id);
CREATE INDEX approval_buttons_by_expiry ON approval_buttons (expires_at);

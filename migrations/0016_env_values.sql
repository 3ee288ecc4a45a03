-- Issue 21 §2: environment requests can be fulfilled. An admin submits the values of an open
-- `request_env_variables` request; the request moves open → fulfilled (once) and the values are stored
-- AES-256-GCM encrypted with SECRETS_ENCRYPTION_KEY like admin secrets (src/security/secrets-store.ts),
-- the scope and key bound as additional data. They reach the session's sandbox only through the admin
-- sandbox bootstrap (`env`); the model is told the key names, never the values.
-- When a request became 'fulfilled' (a table of its own, so env_requests keeps its columns).
CREATE TABLE env_request_fulfilments (
  request_id TEXT PRIMARY KEY,        -- env_requests.id
  fulfilled_at TEXT NOT NULL          -- ISO 8601 UTC
);
-- Newest first, per session (the admin list's session filter and the run's "keys now available" note).
CREATE INDEX env_requests_by_session ON env_requests (session_id, status, created_at);

CREATE TABLE env_values (
  scope TEXT NOT NULL,        -- 'session:<session_id>' (persist false) or 'agent:<agent_id>' (persist true)
  key TEXT NOT NULL,          -- the variable name
  type TEXT NOT NULL,         -- 'env' | 'secret' (from the request)
  iv TEXT NOT NULL,           -- base64, 12 bytes
  ciphertext TEXT NOT NULL,   -- base64, value + 16-byte GCM tag
  request_id TEXT NOT NULL,   -- the request that supplied it
  updated_at TEXT NOT NULL,
  PRIMARY KEY (scope, key)
);
